"""Text to tokenize: .txt, .jsonl and .parquet files (or folders of them), local or any fsspec URL.

The input is cut into ``TextChunk``s, the unit of parallel work and of resumption: a parquet row
group, a byte range of a JSON-lines file (a line belongs to the range holding its first byte), or a
whole .txt file (one document). Chunks depend only on the files, so the same files always give the
same chunks. A document's id is its ``id`` field when present, else a hash of its text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from marin_pipelines.documents import KEPT_PREFIX

SUFFIXES = (".txt", ".jsonl", ".parquet")
JSONL_CHUNK_BYTES = 32 << 20


@dataclass(frozen=True)
class TextChunk:
    """A piece of one input file: ``part`` is a row group (parquet) or a byte range start..stop (jsonl)."""

    url: str
    kind: str  # one of SUFFIXES without the dot
    part: int = 0
    start: int = 0
    stop: int = 0


def text_id(text: str) -> str:
    return xxhash.xxh64_hexdigest(text.encode("utf-8"))


def find_text_files(paths: list[str]) -> list[str]:
    """Files (as URLs) behind ``paths``, in a stable order. A folder holding ``documents-*.parquet``
    (a document stage's output) contributes those only, not its removed documents."""
    files: list[str] = []
    for path in paths:
        fs, root = fsspec.core.url_to_fs(path)
        if fs.isdir(root):
            found = sorted(fs.glob(f"{root.rstrip('/')}/{KEPT_PREFIX}-*.parquet"))
            found = found or sorted(p for p in fs.find(root) if p.endswith(SUFFIXES))
            if not found:
                raise FileNotFoundError(f"no {', '.join(SUFFIXES)} files under {path}")
        elif fs.isfile(root):
            if not root.endswith(SUFFIXES):
                raise ValueError(f"cannot read {path}: expected a file ending in one of {SUFFIXES}")
            found = [root]
        else:
            raise FileNotFoundError(f"input not found: {path}")
        files += [fs.unstrip_protocol(p) for p in found]
    return files


def text_chunks(paths: list[str]) -> list[TextChunk]:
    chunks: list[TextChunk] = []
    for url in find_text_files(paths):
        kind = url.rsplit(".", 1)[1]
        if kind == "parquet":
            with fsspec.open(url, "rb") as f:
                try:
                    groups = pq.ParquetFile(f).metadata.num_row_groups
                except pa.ArrowException as e:
                    raise ValueError(f"{url}: not a readable parquet file ({e})") from None
            chunks += [TextChunk(url, kind, part=g) for g in range(groups)]
        elif kind == "jsonl":
            fs, path = fsspec.core.url_to_fs(url)
            size = fs.size(path)
            chunks += [
                TextChunk(url, kind, part=i, start=start, stop=min(start + JSONL_CHUNK_BYTES, size))
                for i, start in enumerate(range(0, size, JSONL_CHUNK_BYTES))
            ]
        else:
            chunks.append(TextChunk(url, kind))
    return chunks


def read_chunk(chunk: TextChunk) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of each document in the chunk; a record without a string ``text``, a line that is
    not JSON, text that is not UTF-8 or a file that is not parquet is an error naming the file."""
    try:
        yield from _read_chunk(chunk)
    except UnicodeDecodeError as e:
        raise ValueError(f"{chunk.url}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{chunk.url}: a line that is not JSON ({e.msg}: {e.doc[:80]!r})") from None
    except pa.ArrowException as e:
        raise ValueError(f"{chunk.url}: not a readable parquet file ({e})") from None


def _read_chunk(chunk: TextChunk) -> Iterator[tuple[str, str]]:
    with fsspec.open(chunk.url, "rb") as f:
        if chunk.kind == "txt":
            text = f.read().decode("utf-8")
            yield text_id(text), text
        elif chunk.kind == "parquet":
            file = pq.ParquetFile(f)
            columns = [c for c in ("id", "text") if c in file.schema_arrow.names]
            if "text" not in columns:
                raise ValueError(f"{chunk.url} has no 'text' column")
            table = file.read_row_group(chunk.part, columns=columns).to_pydict()
            texts = table["text"]
            ids = table.get("id") or [None] * len(texts)
            for doc_id, text in zip(ids, texts, strict=True):
                yield _checked(doc_id, text, chunk)
        else:
            if chunk.start:
                f.seek(chunk.start - 1)
                f.readline()  # the rest of a line that began in the previous chunk
            while f.tell() < chunk.stop and (line := f.readline()):
                if line.strip():
                    record = json.loads(line)
                    if not isinstance(record, dict):
                        raise ValueError(f"{chunk.url}: a line is {type(record).__name__}, not a JSON object")
                    yield _checked(record.get("id"), record.get("text"), chunk)


def _checked(doc_id: object, text: object, chunk: TextChunk) -> tuple[str, str]:
    if not isinstance(text, str):
        raise ValueError(f"{chunk.url}: a document's 'text' is {type(text).__name__}, expected a string")
    return (str(doc_id) if doc_id is not None else text_id(text)), text
