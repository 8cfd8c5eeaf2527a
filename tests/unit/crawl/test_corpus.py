"""The corpus step's core: documents from parquet, JSON lines (plain, gzip, zstandard) and saved Hugging Face
datasets; rows that are no document counted, named and kept; the same bytes on any number of workers; a
killed run resumed; the files' identity in the version; and the command line's last line."""

import gzip
import inspect
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from marin_pipelines.cli import main
from marin_pipelines.crawl.corpus import CorpusConfig, FieldMappingError, corpus_identity, write_corpus
from marin_pipelines.documents import read_documents
from marin_pipelines.engine import LocalEngine
from marin_pipelines.experiments.defaults import corpus, corpus_and_text, quality_and_curation
from marin_pipelines.step_runner import run_steps
from marin_pipelines.store import ArtifactStore


def real_texts(n: int = 40) -> list[str]:
    """Docstrings of the standard library: real prose, no download."""
    import collections
    import functools
    import textwrap

    texts = []
    for module in (json, collections, functools, textwrap, inspect, os):
        for name in sorted(dir(module)):
            doc = inspect.getdoc(getattr(module, name))
            if doc and len(doc) > 80 and doc not in texts:
                texts.append(doc)
    assert len(texts) >= n
    return texts[:n]


def rows(texts: list[str], prefix: str) -> list[dict]:
    return [
        {"id": f"{prefix}{i}", "text": text, "url": f"https://docs.python.org/{prefix}/{i}"}
        for i, text in enumerate(texts)
    ]


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def every_format(folder: Path, texts: list[str]) -> dict[str, list[dict]]:
    """The same kind of rows in every format the corpus reads; returns each file's rows."""
    folder.mkdir(parents=True)
    parts = {name: rows(texts[i * 8 : i * 8 + 8], name) for i, name in enumerate("abcde")}
    pq.write_table(pa.Table.from_pylist(parts["a"]), folder / "a.parquet", row_group_size=3)
    (folder / "b.jsonl").write_bytes(jsonl(parts["b"]))
    (folder / "c.json.gz").write_bytes(gzip.compress(jsonl(parts["c"])))
    (folder / "d.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl(parts["d"])))
    import datasets

    datasets.Dataset.from_list(parts["e"]).save_to_disk(str(folder / "e_saved"))
    return parts


def tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_every_format_gives_its_rows_as_documents(tmp_path):
    parts = every_format(tmp_path / "in", real_texts())
    config = CorpusConfig(paths=[str(tmp_path / "in"), str(tmp_path / "in" / "e_saved")], keep_fields=["url"])
    result = write_corpus(config, str(tmp_path / "out"))
    expected = [row for name in "abcde" for row in parts[name]]  # file order: the folder's, then the dataset
    assert list(read_documents(tmp_path / "out")) == expected
    assert result.funnel.as_dict() == {"docs_in": 40, "docs_out": 40, "removed": {}}
    assert result.files == 5 and result.units == 3 + 4 and result.fields == ["id", "text", "url"]
    assert not list((tmp_path / "out").glob("removed-*")) and not (tmp_path / "out" / "_done").exists()


def test_a_dataset_dict_gives_its_splits_and_a_split_folder_itself(tmp_path):
    import datasets

    texts = real_texts(6)
    saved = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": texts[:4]}),
            "test": datasets.Dataset.from_dict({"text": texts[4:]}),
        }
    )
    saved.save_to_disk(str(tmp_path / "dd"))
    write_corpus(CorpusConfig(paths=[str(tmp_path / "dd")]), str(tmp_path / "all"))
    assert [d["text"] for d in read_documents(tmp_path / "all")] == texts
    write_corpus(CorpusConfig(paths=[str(tmp_path / "dd" / "test")]), str(tmp_path / "test"))
    assert [d["text"] for d in read_documents(tmp_path / "test")] == texts[4:]


def test_rows_that_are_no_document_are_counted_named_and_kept(tmp_path):
    texts = real_texts(4)
    lines = [
        json.dumps({"id": "ok", "text": texts[0]}),
        "this line is not JSON",
        json.dumps({"id": "number", "text": 42}),
        json.dumps({"id": "other", "body": texts[1]}),
        "",  # a blank line is no row, but it is a line
        json.dumps({"id": "blank", "text": " \n\t "}),
        json.dumps({"id": "big", "text": texts[2] * 50}),
        "[1, 2]",
        json.dumps({"id": "half", "text": "\ud800 half a pair"}),
    ]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bad.jsonl").write_bytes("\n".join(lines).encode() + b"\n" + b'{"text": "caf\xe9"}\n')
    pq.write_table(pa.table({"text": [texts[3], None]}), folder / "nulls.parquet")
    config = CorpusConfig(paths=[str(folder)], max_chars=len(texts[2]) * 10)
    result = write_corpus(config, str(tmp_path / "out"))
    assert result.funnel.as_dict() == {
        "docs_in": 11,
        "docs_out": 2,
        "removed": {"empty": 1, "missing_field": 2, "not_text": 1, "too_large": 1, "undecodable_line": 4},
    }
    bad, nulls = str(folder / "bad.jsonl"), str(folder / "nulls.parquet")
    assert result.places == {
        "missing_field": [f"{bad} line 4", f"{nulls} row 1"],
        "not_text": [f"{bad} line 3"],
        "empty": [f"{bad} line 6"],
        "too_large": [f"{bad} line 7"],
        "undecodable_line": [f"{bad} line 2", f"{bad} line 8", f"{bad} line 9", f"{bad} line 10"],
    }
    removed = {
        (r["reason"], r["place"].rsplit(" ", 1)[1]): r for r in read_documents(tmp_path / "out", "removed")
    }
    assert removed["undecodable_line", "2"]["text"] == "this line is not JSON\n"  # what can be read of it
    assert removed["undecodable_line", "10"]["text"] == '{"text": "caf\ufffd"}\n'
    assert removed["not_text", "3"]["text"] == "42" and removed["too_large", "7"]["id"] == "big"
    assert [d["id"] for d in read_documents(tmp_path / "out")] == ["ok", removed_id(texts[3])]


def removed_id(text: str) -> str:
    from marin_pipelines.tokenize.text_sources import text_id

    return text_id(text)


def test_places_count_lines_across_byte_ranges(tmp_path, monkeypatch):
    """A plain JSON-lines file is cut into byte ranges; a bad line is named by its line in the file."""
    from marin_pipelines.tokenize import text_sources

    monkeypatch.setattr(text_sources, "JSONL_CHUNK_BYTES", 100)
    lines = [json.dumps({"text": text}) for text in real_texts(10)]
    lines[7] = "{broken"
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    result = write_corpus(CorpusConfig(paths=[str(tmp_path / "a.jsonl")]), str(tmp_path / "out"))
    assert result.units > 5 and result.places == {"undecodable_line": [f"{tmp_path / 'a.jsonl'} line 8"]}


def test_a_hub_cache_snapshot_is_read_through_its_links_to_blobs(tmp_path):
    """The Hugging Face hub cache's layout: snapshot files are symbolic links into blobs/."""
    (tmp_path / "blobs").mkdir()
    pq.write_table(pa.table({"text": ["one document here", "and another one"]}), tmp_path / "blobs" / "9f2c")
    data = tmp_path / "snapshots" / "rev1" / "data"
    data.mkdir(parents=True)
    (data / "train-00000-of-00001.parquet").symlink_to(Path("../../../blobs/9f2c"))
    config = CorpusConfig(paths=[str(tmp_path / "snapshots" / "rev1")], globs=["data/*.parquet"])
    result = write_corpus(config, str(tmp_path / "out"))
    assert result.funnel.docs_out == 2 and result.bytes == (tmp_path / "blobs" / "9f2c").stat().st_size
    (data / "train-extra.parquet").symlink_to(Path("../../../blobs/gone"))  # a blob not downloaded
    with pytest.raises(FileNotFoundError, match=r"train-extra.parquet is a link to .*gone, which does not"):
        write_corpus(config, str(tmp_path / "again"))


def test_a_field_mapping_that_matches_nothing_lists_the_fields(tmp_path):
    every_format(tmp_path / "in", real_texts())
    with pytest.raises(FieldMappingError, match=r"text field 'content' \(the files' fields: id, text, url\)"):
        write_corpus(CorpusConfig(paths=[str(tmp_path / "in")], text_field="content"), str(tmp_path / "o1"))
    with pytest.raises(FieldMappingError, match=r"keep_fields \['lang'\]: no file has them"):
        write_corpus(CorpusConfig(paths=[str(tmp_path / "in")], keep_fields=["lang"]), str(tmp_path / "o2"))


def test_other_fields_map_to_the_text_and_id(tmp_path):
    texts = real_texts(3)
    records = [{"content": t, "doc_id": 7 + i, "meta": {"lang": "en"}} for i, t in enumerate(texts)]
    (tmp_path / "a.jsonl").write_bytes(jsonl(records))
    config = CorpusConfig(
        paths=[str(tmp_path)], text_field="content", id_field="doc_id", keep_fields=["meta"]
    )
    write_corpus(config, str(tmp_path / "out"))
    assert list(read_documents(tmp_path / "out")) == [
        {"id": str(7 + i), "text": t, "meta": {"lang": "en"}} for i, t in enumerate(texts)
    ]


def test_the_same_bytes_on_one_and_two_workers_with_and_without_a_limit(tmp_path):
    every_format(tmp_path / "in", real_texts())
    for name, fields in (("all", {}), ("limited", {"limit": 13}), ("sampled", {"sample": 0.5, "seed": 3})):
        config = CorpusConfig(paths=[str(tmp_path / "in")], **fields)
        one = write_corpus(config, str(tmp_path / f"{name}1"), LocalEngine(1))
        two = write_corpus(config, str(tmp_path / f"{name}2"), LocalEngine(2))
        assert tree(tmp_path / f"{name}1") == tree(tmp_path / f"{name}2") and one == two
    limited = list(read_documents(tmp_path / "limited1"))
    assert len(limited) == 13 and limited == list(read_documents(tmp_path / "all1"))[:13]
    sampled = write_corpus(
        CorpusConfig(paths=[str(tmp_path / "in")], sample=0.5, seed=3), str(tmp_path / "again")
    )
    assert tree(tmp_path / "again") == tree(tmp_path / "sampled1")
    assert 10 < sampled.funnel.docs_in < 30 and sampled.funnel.docs_in + sampled.sampled_out == 40
    other = write_corpus(
        CorpusConfig(paths=[str(tmp_path / "in")], sample=0.5, seed=4), str(tmp_path / "seed4")
    )
    assert tree(tmp_path / "seed4") != tree(tmp_path / "sampled1") and other.sampled_out != 0


def test_same_named_files_in_different_folders_are_sampled_apart(tmp_path):
    """Every split of a saved DatasetDict is a folder with a file of the same name: a sample keyed by the
    base name took the same rows of each; keyed by the path below the files' common folder, it does not, and
    a copy of the corpus elsewhere samples the same rows."""
    import shutil

    import datasets

    texts = real_texts(40)
    splits = {
        name: datasets.Dataset.from_dict({"text": texts, "id": [f"{name}-{i}" for i in range(40)]})
        for name in ("train", "test")
    }
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "dd"))
    names = {name: sorted(p.name for p in (tmp_path / "dd" / name).glob("*.arrow")) for name in splits}
    assert names["train"] == names["test"]  # the same file name in both folders
    config = CorpusConfig(paths=[str(tmp_path / "dd")], sample=0.5, seed=1)
    write_corpus(config, str(tmp_path / "out"))
    kept = {name: set() for name in splits}
    for doc in read_documents(tmp_path / "out"):
        split, row = doc["id"].split("-")
        kept[split].add(int(row))
    assert all(5 < len(rows) < 35 for rows in kept.values()) and kept["train"] != kept["test"]
    shutil.copytree(tmp_path / "dd", tmp_path / "elsewhere" / "dd")
    moved = config.model_copy(update={"paths": [str(tmp_path / "elsewhere" / "dd")]})
    write_corpus(moved, str(tmp_path / "again"))
    assert tree(tmp_path / "again") == tree(tmp_path / "out")
    assert corpus_identity(config) != corpus_identity(config.model_copy(update={"sample": 1.0}))


def test_a_killed_run_redoes_only_the_unfinished_units(tmp_path):
    """The second file is damaged (a truncated gzip): the first file's unit is done, and a rerun after the
    file is mended does not redo it."""
    texts = real_texts()
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(jsonl(rows(texts[:20], "a")))
    whole = gzip.compress(jsonl(rows(texts[20:], "b")))
    (folder / "b.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    config = CorpusConfig(paths=[str(folder)])
    with pytest.raises(ValueError, match=r"b\.jsonl\.gz: not a readable jsonl\.gz file"):
        write_corpus(config, str(tmp_path / "work"))
    first = tmp_path / "work" / "documents-00000-00000.parquet"
    made = first.stat().st_mtime_ns
    (folder / "b.jsonl.gz").write_bytes(whole)
    write_corpus(config, str(tmp_path / "work"))
    assert first.stat().st_mtime_ns == made  # not written again
    write_corpus(config, str(tmp_path / "fresh"))
    assert tree(tmp_path / "work") == tree(tmp_path / "fresh")


def test_the_files_identity_versions_the_step(tmp_path):
    every_format(tmp_path / "in", real_texts())
    config = CorpusConfig(paths=[str(tmp_path / "in")])
    step = corpus("t/corpus", [str(tmp_path / "in")])
    assert corpus_identity(config) == corpus_identity(config)
    assert corpus("t/corpus", [str(tmp_path / "in")]).version == step.version  # unchanged: the same
    path = tmp_path / "in" / "b.jsonl"
    path.write_bytes(path.read_bytes() + jsonl([{"text": "one more line of text"}]))
    assert corpus("t/corpus", [str(tmp_path / "in")]).version != step.version  # changed: a new version
    assert corpus("t/corpus", [str(tmp_path / "in")], text_field="body").version != step.version
    assert corpus_identity(CorpusConfig(paths=[str(tmp_path / "gone")])) == {
        "missing": f"input not found: {tmp_path / 'gone'}"
    }


def test_the_text_stages_take_a_corpus(tmp_path):
    """corpus -> filtered -> dedup -> quality -> curated, through the step runner (no Dagster): each stage
    reads what the one before kept, and dedup removes the rows the dataset holds twice."""
    texts = real_texts()
    (tmp_path / "docs.jsonl").write_bytes(jsonl(rows(texts, "d") + rows(texts[:5], "copy")))
    off = {"enabled": False}
    filters = {"language": off, "gopher_repetition": off, "gopher_quality": off, "c4": off, "fineweb": off}
    text = corpus_and_text(
        "t", [str(tmp_path / "docs.jsonl")], corpus={"keep_fields": ["url"]}, filters=filters
    )
    quality = quality_and_curation("t", text.deduplicated_text, quality={"bucket": 10_000, "epoch": 5})
    run = run_steps([*text, quality.curated_text], ArtifactStore(tmp_path / "store"))
    funnels = [run.partitions(s)["corpus"].metadata["funnel"] for s in text]
    assert [f["docs_in"] for f in funnels] == [45, 45, 45] and funnels[1]["docs_out"] == 45
    assert funnels[2]["docs_out"] <= 40  # the five copies (and near-duplicate docstrings) removed
    assert run.outputs[quality.curated_text.name].metadata["funnel"]["docs_in"] == funnels[2]["docs_out"]


def test_the_command_prints_its_funnel_last_and_says_what_is_wrong_in_one_line(tmp_path, capsys):
    every_format(tmp_path / "in", real_texts())
    args = ["corpus", "--input", str(tmp_path / "in"), "--keep-field", "url", "--workers", "2"]
    assert main([*args, "--limit", "30", "--out", str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["funnel"] == {"docs_in": 30, "docs_out": 30, "removed": {}} and summary["units"] == 7
    assert len(list(read_documents(tmp_path / "out"))) == 30
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no work folder left
    assert main([*args, "--text-field", "body", "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "text field 'body' (the files' fields: id, text, url)" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
