"""Documents from files of text named on the command line (``marin-pipelines forecast --text``): collections
of documents (``.jsonl`` lines and ``.parquet`` rows with a ``text`` field) as they are, any other file one
document.

A folder holding ``documents-*.parquet`` (a document stage's or ``package_text``'s output) gives those
shards only, not its manifest or removed documents; any other folder gives every file under it, hidden
names and ``__pycache__`` left out. A plain file that is not UTF-8 text, and a document of nothing but
whitespace, are left out and counted, with their file; a collection that cannot be read is an error naming
it (``tokenize/text_sources.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marin_pipelines.documents import KEPT_PREFIX, Decision
from marin_pipelines.tokenize.text_sources import read_chunk, text_chunks, text_id

DOCUMENT_SUFFIXES = (".jsonl", ".parquet")  # files that hold many documents; any other file is one
SKIPPED_NAMES = ("__pycache__",)  # bytecode caches beside source files: never text
NOT_UTF8 = "not_utf8"  # the reasons a document is left out
UNREADABLE = "unreadable"
EMPTY = "empty"  # nothing but whitespace


@dataclass(frozen=True)
class TextFiles:
    """The files behind some paths: collections of documents, and plain files (each one document)."""

    collections: list[Path]
    plain: list[Path]

    def identity(self) -> list[list[Any]]:
        """Path, size and modification time of every file: a changed file is other text."""
        files = sorted(self.collections + self.plain)
        return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def find_text(paths: Sequence[str | os.PathLike[str]]) -> TextFiles:
    """Every file behind ``paths`` (module docstring); a missing path or an empty folder is an error."""
    if not paths:
        raise ValueError("no text given: name at least one file or folder")
    collections: list[Path] = []
    plain: list[Path] = []
    for given in paths:
        path = Path(given).expanduser().resolve()
        if path.is_dir():
            files = sorted(path.glob(f"{KEPT_PREFIX}-*.parquet")) or list(_files_under(path))
            if not files:
                raise FileNotFoundError(f"text {given}: the folder holds no files")
        elif path.is_file():
            files = [path]
        else:
            raise FileNotFoundError(f"text {given}: no such file or folder")
        for file in files:
            (collections if file.suffix in DOCUMENT_SUFFIXES else plain).append(file)
    return TextFiles(collections, plain)


def _files_under(folder: Path) -> Iterator[Path]:
    """Files under ``folder`` in a stable order, without hidden names or bytecode caches."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_NAMES)
        yield from (Path(root) / f for f in sorted(files) if not f.startswith("."))


def text_documents(text: TextFiles) -> Iterator[Decision]:
    """``(document, reason)`` for every document (``reason`` None) and every one left out (the reason, with
    its file as the document's ``source``), collections first, each in file order."""
    if text.collections:
        for chunk in text_chunks([str(f) for f in text.collections]):
            for doc_id, body in read_chunk(chunk):
                yield {"id": doc_id, "text": body, "source": chunk.url}, None if body.strip() else EMPTY
    for file in text.plain:
        try:
            body = file.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            yield {"id": str(file), "text": None, "source": str(file)}, NOT_UTF8
            continue
        except OSError:
            yield {"id": str(file), "text": None, "source": str(file)}, UNREADABLE
            continue
        yield {"id": text_id(body), "text": body, "source": str(file)}, None if body.strip() else EMPTY
