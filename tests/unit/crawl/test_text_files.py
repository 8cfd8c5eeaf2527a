"""Files of text as documents (``crawl/text_files.py``): what ``forecast --text`` reads."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin_pipelines.crawl.text_files import EMPTY, NOT_UTF8, find_text, text_documents
from marin_pipelines.tokenize.text_sources import text_id


def test_a_document_stage_folder_gives_its_shards_only(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b"]}), tmp_path / "documents-0-0.parquet")
    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "removed-0-0.parquet").write_bytes(b"")
    found = find_text([tmp_path])
    assert (found.collections, found.plain) == ([tmp_path / "documents-0-0.parquet"], [])
    os.remove(tmp_path / "documents-0-0.parquet")
    found = find_text([tmp_path, tmp_path / "manifest.json"])
    assert found.collections == [tmp_path / "removed-0-0.parquet"]
    assert found.plain == [tmp_path / "manifest.json"] * 2


def test_every_kind_of_file_gives_its_documents_and_a_binary_one_is_counted(tmp_path):
    (tmp_path / "sub" / "__pycache__").mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("plain text")
    (tmp_path / "sub" / "lines.jsonl").write_text(
        json.dumps({"text": "one", "id": "a"}) + "\n\n" + json.dumps({"text": "two"}) + "\n"
    )
    pq.write_table(pa.table({"text": ["three"]}), tmp_path / "rows.parquet")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xff")
    (tmp_path / "blank.md").write_text(" \n\t\n")
    (tmp_path / ".hidden").write_bytes(b"\xff")  # hidden names and bytecode caches are not looked at
    (tmp_path / "sub" / "__pycache__" / "x.pyc").write_bytes(b"\xff")
    decisions = list(text_documents(find_text([tmp_path])))
    kept = [(doc["id"], doc["text"]) for doc, reason in decisions if reason is None]
    assert kept == [
        (text_id("three"), "three"),
        ("a", "one"),
        (text_id("two"), "two"),
        (text_id("plain text"), "plain text"),
    ]
    left_out = [(doc["source"], reason) for doc, reason in decisions if reason is not None]
    assert left_out == [(str(tmp_path / "blank.md"), EMPTY), (str(tmp_path / "image.png"), NOT_UTF8)]


def test_a_missing_path_or_an_empty_folder_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere: no such file or folder"):
        find_text([tmp_path / "nowhere"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty: the folder holds no files"):
        find_text([tmp_path / "empty"])
    with pytest.raises(ValueError, match="no text given"):
        find_text([])


def test_a_changed_file_changes_the_identity(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    before = find_text([tmp_path]).identity()
    (tmp_path / "a.txt").write_text("one more")
    assert find_text([tmp_path]).identity() != before
