"""Text to tokenize: .txt, .jsonl and .parquet files (or folders of them), local or any fsspec URL.

The input is cut into ``TextChunk``s, the unit of parallel work and of resumption: a parquet row
group, a byte range of a JSON-lines file (a line belongs to the range holding its first byte), or a
whole .txt file (one document). Chunks depend only on the files, so the same files always give the
same chunks. A document's id is its ``id`` field when present, else a hash of its text.

The corpus step (``crawl/corpus.py``) reads more kinds through the same chunks and records: compressed
JSON lines (one chunk a file: a compressed stream cannot be entered half-way) and Arrow files (a Hugging
Face dataset saved to disk), and it decides about each record itself instead of failing on a bad one.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from marin_pipelines.documents import KEPT_PREFIX

SUFFIXES = (".txt", ".jsonl", ".parquet")
JSONL_CHUNK_BYTES = 32 << 20
COMPRESSION = {"gz": "gzip", "zst": "zstd"}  # a JSON-lines file's last suffix -> fsspec's compression


@dataclass(frozen=True)
class TextChunk:
    """A piece of one input file: ``part`` is a row group (parquet) or a byte range start..stop (jsonl)."""

    url: str
    kind: str  # its suffix without the dot: one of SUFFIXES, or jsonl.gz, jsonl.zst, json.gz, arrow, ...
    part: int = 0
    start: int = 0
    stop: int = 0


@dataclass(frozen=True)
class Record:
    """One row or line of a chunk: ``row`` counts from the chunk's start (blank lines too); ``fields`` is
    None for a line that is not a JSON object, and ``error`` says why."""

    row: int
    fields: dict[str, Any] | None
    error: ValueError | None = None


def text_id(text: str) -> str:
    return xxhash.xxh64_hexdigest(text.encode("utf-8"))


def find_text_files(paths: list[str]) -> list[str]:
    """Files (as URLs) behind ``paths``, in a stable order. A folder holding ``documents-*.parquet``
    (a document stage's output) contributes those only, not its removed documents."""
    return list(find_files(paths))


def find_files(
    paths: Sequence[str], suffixes: tuple[str, ...] = SUFFIXES, globs: Sequence[str] = ()
) -> dict[str, dict[str, Any]]:
    """Files behind ``paths`` (URL -> fsspec info: size, and a change token such as a modification time or
    an object generation), in a stable order. A folder gives the files ``globs`` match under it, else its
    ``documents-*.parquet`` (a document stage's output) if it has some, else every file under it; only
    files ending in one of ``suffixes`` are taken."""
    files: dict[str, dict[str, Any]] = {}
    for path in paths:
        fs, root = fsspec.core.url_to_fs(path)
        if fs.isdir(root):
            base = root.rstrip("/")
            if globs:
                found = {k: v for g in globs for k, v in fs.glob(f"{base}/{g}", detail=True).items()}
            else:
                found = fs.glob(f"{base}/{KEPT_PREFIX}-*.parquet", detail=True) or fs.find(root, detail=True)
            found = {k: _through_link(fs, k, v) for k, v in found.items()}
            found = {k: v for k, v in found.items() if v["type"] == "file" and k.endswith(suffixes)}
            if not found:
                which = f"matching {', '.join(globs)}" if globs else f"ending in {', '.join(suffixes)}"
                raise FileNotFoundError(f"no files {which} under {path}")
        elif fs.isfile(root):
            if not root.endswith(suffixes):
                raise ValueError(f"cannot read {path}: expected a file ending in one of {suffixes}")
            found = {root: fs.info(root)}
        else:
            raise FileNotFoundError(f"input not found: {path}")
        files.update((fs.unstrip_protocol(name), found[name]) for name in sorted(found))
    return files


def _through_link(fs: Any, name: str, info: dict[str, Any]) -> dict[str, Any]:
    """A local symbolic link as the file it points to (a Hugging Face hub cache's snapshot files are links
    to its blobs): the target's size and modification time, the link's name."""
    if not info.get("islink") or info["type"] == "file":
        return info
    try:
        return {**fs.info(os.path.realpath(name)), "name": name}
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{name} is a link to {os.path.realpath(name)}, which does not exist"
        ) from None


def kind_of(url: str, suffixes: tuple[str, ...] = SUFFIXES) -> str:
    """The suffix ``url`` ends in (without its dot), the longest that matches."""
    return max((s for s in suffixes if url.endswith(s)), key=len)[1:]


def text_chunks(paths: list[str]) -> list[TextChunk]:
    return [chunk for url in find_text_files(paths) for chunk in file_chunks(url, kind_of(url))]


def file_chunks(url: str, kind: str) -> list[TextChunk]:
    """The chunks of one file: its row groups (parquet), byte ranges (plain JSON lines), else the file."""
    if kind == "parquet":
        with fsspec.open(url, "rb") as f:
            try:
                groups = pq.ParquetFile(f).metadata.num_row_groups
            except pa.ArrowException as e:
                raise ValueError(f"{url}: not a readable parquet file ({e})") from None
        return [TextChunk(url, kind, part=g) for g in range(groups)]
    if kind == "jsonl":
        fs, path = fsspec.core.url_to_fs(url)
        size = fs.size(path)
        return [
            TextChunk(url, kind, part=i, start=start, stop=min(start + JSONL_CHUNK_BYTES, size))
            for i, start in enumerate(range(0, size, JSONL_CHUNK_BYTES))
        ]
    return [TextChunk(url, kind)]


def read_chunk(chunk: TextChunk) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of each document in the chunk; a record without a string ``text``, a line that is
    not JSON, text that is not UTF-8 or a file that is not parquet is an error naming the file."""
    try:
        if chunk.kind == "txt":
            with fsspec.open(chunk.url, "rb") as f:
                text = f.read().decode("utf-8")
            yield text_id(text), text
            return
        columns: set[str] = set()
        for record in chunk_records(chunk, ["id", "text"], columns):
            if record.fields is None:
                raise record.error or ValueError(f"{chunk.url}: an unreadable line")
            if chunk.kind == "parquet" and "text" not in columns:
                break
            yield _checked(record.fields.get("id"), record.fields.get("text"), chunk)
        if chunk.kind == "parquet" and "text" not in columns:
            raise ValueError(f"{chunk.url} has no 'text' column")
    except UnicodeDecodeError as e:
        raise ValueError(f"{chunk.url}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{chunk.url}: a line that is not JSON ({e.msg}: {e.doc[:80]!r})") from None
    except pa.ArrowException as e:
        raise ValueError(f"{chunk.url}: not a readable parquet file ({e})") from None


def chunk_records(chunk: TextChunk, columns: Sequence[str], seen: set[str] | None = None) -> Iterator[Record]:
    """The records of a table chunk (parquet, arrow: only ``columns``, those the file has) or a JSON-lines
    chunk (every field of each line), in order. ``seen`` collects the field names the chunk has: a table's
    columns, the keys of the lines. A line that is not a JSON object is a record without fields."""
    compression = COMPRESSION.get(chunk.kind.rsplit(".", 1)[-1])
    with fsspec.open(chunk.url, "rb", compression=compression) as opened:
        f = (
            io.BufferedReader(opened, 1 << 20) if compression else opened
        )  # zstandard's reader has no readline
        if chunk.kind in ("parquet", "arrow"):
            yield from _table_records(f, chunk, columns, seen)
            return
        if chunk.start:
            f.seek(chunk.start - 1)
            f.readline()  # the rest of a line that began in the previous chunk
        row = -1
        while (chunk.kind != "jsonl" or f.tell() < chunk.stop) and (line := f.readline()):
            row += 1
            if not line.strip():
                continue
            try:
                fields = json.loads(line)
            except ValueError as e:  # not JSON, or not UTF-8
                yield Record(row, None, e)
                continue
            if not isinstance(fields, dict):
                yield Record(
                    row,
                    None,
                    ValueError(f"{chunk.url}: a line is {type(fields).__name__}, not a JSON object"),
                )
                continue
            if seen is not None:
                seen.update(fields)
            yield Record(row, fields)


def _table_records(
    f: Any, chunk: TextChunk, columns: Sequence[str], seen: set[str] | None
) -> Iterator[Record]:
    if chunk.kind == "parquet":
        file = pq.ParquetFile(f)
        names = file.schema_arrow.names
        batches = [file.read_row_group(chunk.part, columns=[c for c in columns if c in names])]
    else:
        try:
            reader = pa.ipc.open_stream(f)  # what `datasets` writes
        except pa.ArrowInvalid:
            f.seek(0)
            reader = pa.ipc.open_file(f)
        names = reader.schema.names
        wanted = [c for c in columns if c in names]
        batches = (batch.select(wanted) for batch in _batches(reader))
    if seen is not None:
        seen.update(names)
    row = 0
    for batch in batches:
        for fields in batch.to_pylist():
            yield Record(row, fields)
            row += 1


def _batches(reader: Any) -> Iterator[pa.RecordBatch]:
    """The record batches of an Arrow stream or file reader."""
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        yield from (reader.get_batch(i) for i in range(reader.num_record_batches))
    else:
        yield from reader


def rows_before(chunk: TextChunk) -> int:
    """Rows (parquet) or lines (JSON lines) of the file before the chunk: to name a record's place."""
    if chunk.kind == "parquet" and chunk.part:
        with fsspec.open(chunk.url, "rb") as f:
            metadata = pq.ParquetFile(f).metadata
        return sum(metadata.row_group(g).num_rows for g in range(chunk.part))
    if chunk.kind == "jsonl" and chunk.start:  # the line at 0, and one after each newline before start - 1
        with fsspec.open(chunk.url, "rb") as f:
            return 1 + f.read(chunk.start - 1).count(b"\n")
    return 0


def _checked(doc_id: object, text: object, chunk: TextChunk) -> tuple[str, str]:
    if not isinstance(text, str):
        raise ValueError(f"{chunk.url}: a document's 'text' is {type(text).__name__}, expected a string")
    return (str(doc_id) if doc_id is not None else text_id(text)), text
