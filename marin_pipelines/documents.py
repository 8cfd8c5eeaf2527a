"""Document shards (parquet, zstd) and the funnel every stage reports.

A stage is a generator of ``(document, reason)`` pairs: ``reason`` is None for a kept document and
names the rule otherwise. ``write_stage`` stores kept documents in ``documents-*.parquet`` and removed
ones, with their reason, in ``removed-*.parquet``, so nothing disappears without a trace.
``run_stage`` runs a per-document stage shard by shard on an engine (``marin_pipelines.engine``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from marin_pipelines.engine import Engine, LocalEngine, Progress, finish_units, map_units

Document = dict[str, Any]
Decision = tuple[Document, str | None]
KEPT_PREFIX = "documents"
REMOVED_PREFIX = "removed"
MISSING_FIELD = "missing_field"  # a row without its text, or with a null one: no document, counted
SHARD_SIZE = 10_000


@dataclass
class Funnel:
    """Documents in, kept, and removed per reason: ``docs_in == docs_out + sum(removed)``."""

    docs_in: int = 0
    docs_out: int = 0
    removed: Counter[str] = field(default_factory=Counter)

    def record(self, reason: str | None) -> None:
        self.docs_in += 1
        if reason is None:
            self.docs_out += 1
        else:
            self.removed[reason] += 1

    @property
    def conserved(self) -> bool:
        return self.docs_in == self.docs_out + sum(self.removed.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "removed": dict(sorted(self.removed.items())),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Funnel:
        return cls(d["docs_in"], d["docs_out"], Counter(d.get("removed", {})))

    def __add__(self, other: Funnel) -> Funnel:
        return Funnel(
            self.docs_in + other.docs_in, self.docs_out + other.docs_out, self.removed + other.removed
        )


def funnel_conserved(artifact: Any) -> tuple[bool, dict[str, Any]]:
    """Every document that came in was either kept or removed for a named reason."""
    funnel = Funnel.from_dict(artifact.metadata["funnel"])
    removed = sum(funnel.removed.values())
    return funnel.conserved, {"docs_in": funnel.docs_in, "docs_out": funnel.docs_out, "removed": removed}


class ShardWriter:
    """Writes rows into numbered parquet shards of at most ``shard_size`` rows.

    Shards are named ``{prefix}-{unit}-{n}.parquet``: ``unit`` is the input shard (or file) they come
    from, so that shards written by parallel workers sort in input order.
    """

    def __init__(self, directory: Path, prefix: str, shard_size: int = SHARD_SIZE, unit: int = 0):
        self.directory, self.prefix, self.shard_size = directory, f"{prefix}-{unit:05d}", shard_size
        self.rows: list[Document] = []
        self.files: list[Path] = []
        self.count = 0

    def write(self, row: Document) -> None:
        self.rows.append(row)
        self.count += 1
        if len(self.rows) >= self.shard_size:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        path = self.directory / f"{self.prefix}-{len(self.files):05d}.parquet"
        columns = list(dict.fromkeys(key for row in self.rows for key in row))  # rows may differ in keys
        table = pa.Table.from_pydict({c: [row.get(c) for row in self.rows] for c in columns})
        pq.write_table(table, path, compression="zstd")
        self.files.append(path)
        self.rows = []


def write_stage(
    decisions: Iterable[Decision], directory: Path, shard_size: int = SHARD_SIZE, unit: int = 0
) -> Funnel:
    """Drain a stage's decisions into kept and removed shards; returns the funnel."""
    funnel = Funnel()
    kept = ShardWriter(directory, KEPT_PREFIX, shard_size, unit)
    removed = ShardWriter(directory, REMOVED_PREFIX, shard_size, unit)
    for doc, reason in decisions:
        funnel.record(reason)
        if reason is None:
            kept.write(doc)
        else:
            removed.write({**doc, "reason": reason})
    kept.flush()
    removed.flush()
    return funnel


def run_stage(
    stage: Callable[[Iterable[Document], Any], Iterable[Decision]],
    config: Any,
    source: str | os.PathLike[str] | Sequence[str],
    work: str | os.PathLike[str],
    engine: Engine | None = None,
    progress: Progress | None = None,
) -> Funnel:
    """A per-document stage over every kept shard of ``source`` (a folder or URL, or several in order: every
    snapshot of a crawl), shard in, shard out, on ``engine``; the shards go into ``work`` (a folder or URL),
    and a rerun redoes only unfinished shards.

    ``stage(docs, config)`` must be picklable (a module-level function) and must decide each document
    on its own, so that output files and funnel are the same on any engine and any number of workers.
    """
    sources = [source] if isinstance(source, str | os.PathLike) else list(source)
    shards = [shard for folder in sources for shard in list_shards(folder)]
    task = partial(_run_shard, stage, config)
    results = map_units(engine or LocalEngine(1), task, shards, str(work), progress)
    finish_units(str(work))
    return sum((Funnel.from_dict(result) for result in results), Funnel())


def list_shards(source: str | os.PathLike[str], prefix: str = KEPT_PREFIX) -> list[str]:
    """The shard files of an artifact folder or URL, in order."""
    fs, root = fsspec.core.url_to_fs(str(source))
    names = sorted(name.rsplit("/", 1)[-1] for name in fs.glob(f"{root.rstrip('/')}/{prefix}-*.parquet"))
    return [f"{str(source).rstrip('/')}/{name}" for name in names]


def check_text_column(shards: Sequence[str]) -> None:
    """Each shard has the ``text`` column every document stage reads, of strings (nulls are documents without
    text, which stages count): parquet files of another kind are an error naming the file and its columns,
    read from the files' footers before any work starts."""
    for url in shards:
        fs, path = fsspec.core.url_to_fs(url)
        with fs.open(path, "rb") as f:
            schema = pq.read_schema(f)
        if "text" not in schema.names:
            columns = ", ".join(schema.names) or "none"
            raise ValueError(f"{url}: no 'text' column (its columns: {columns}); not a document shard")
        kind = schema.field("text").type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
            raise ValueError(f"{url}: its 'text' column holds {kind}, not text")


def read_shard(url: str, columns: list[str] | None = None) -> list[Document]:
    """A parquet shard's rows, from a local path or a URL (what a worker on another machine reads)."""
    fs, path = fsspec.core.url_to_fs(url)
    with fs.open(path, "rb") as f:
        return pq.read_table(f, columns=columns).to_pylist()


def _run_shard(
    stage: Callable[[Iterable[Document], Any], Iterable[Decision]],
    config: Any,
    unit: int,
    url: str,
    directory: Path,
) -> dict[str, Any]:
    return write_stage(stage(read_shard(url), config), directory, unit=unit).as_dict()


def read_documents(
    directory: Path, prefix: str = KEPT_PREFIX, columns: list[str] | None = None
) -> Iterator[Document]:
    """Documents of an artifact directory in shard order."""
    for path in sorted(directory.glob(f"{prefix}-*.parquet")):
        table = pq.read_table(path, columns=columns)
        yield from table.to_pylist()
