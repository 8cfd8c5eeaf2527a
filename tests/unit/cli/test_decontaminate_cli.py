"""`decontaminate` and `corpus` on input they cannot use: one error line naming the file and column, and
nothing left behind, so the corrected command runs into the same --out; null texts counted, no traceback."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from marin_pipelines.cli import main

ITEM = "the quick brown fox jumps over the lazy dog near the quiet river bank today"


def documents(folder, rows):
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), folder / "documents-00000.parquet")
    return folder


def leftovers(tmp_path, name):
    return sorted(p.name for p in tmp_path.iterdir() if name in p.name)


def test_a_shard_without_text_is_refused_before_out_is_made(tmp_path, capsys):
    (tmp_path / "items.txt").write_text(ITEM + "\n")
    wrong = documents(tmp_path / "wrong", [{"id": "a", "body": f"Intro. {ITEM}."}])
    argv = ["decontaminate", "--against", str(tmp_path / "items.txt"), "--out", str(tmp_path / "out")]
    assert main([*argv, "--input", str(wrong)]) == 2
    error = capsys.readouterr().err
    assert "documents-00000.parquet: no 'text' column (its columns: id, body)" in error
    assert "Traceback" not in error and leftovers(tmp_path, "out") == []
    numbers = documents(tmp_path / "numbers", [{"id": "a", "text": 7}])
    assert main([*argv, "--input", str(numbers)]) == 2
    assert "its 'text' column holds int64, not text" in capsys.readouterr().err
    right = documents(tmp_path / "right", [{"id": "a", "text": f"Intro. {ITEM}."}, {"id": "b", "text": None}])
    assert main([*argv, "--input", str(right)]) == 0  # the corrected command, into the same --out
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["funnel"] == {
        "docs_in": 2,
        "docs_out": 0,
        "removed": {"contaminated": 1, "missing_field": 1},
    }
    assert leftovers(tmp_path, "out") == ["out"]


def test_a_corpus_refused_for_its_mapping_leaves_no_work_folder(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(json.dumps({"id": 1, "body": ITEM}) + "\n")
    argv = ["corpus", "--input", str(tmp_path / "in"), "--out", str(tmp_path / "docs")]
    assert main(argv) == 2
    assert "no row of 1 read has the text field 'text'" in capsys.readouterr().err
    assert leftovers(tmp_path, "docs") == []
    assert main([*argv, "--text-field", "body"]) == 0
    assert leftovers(tmp_path, "docs") == ["docs"]
