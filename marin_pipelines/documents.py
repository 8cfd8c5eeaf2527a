"""Document shards (parquet, zstd) and the funnel every stage reports.

A stage is a generator of ``(document, reason)`` pairs: ``reason`` is None for a kept document and
names the rule otherwise. ``write_stage`` stores kept documents in ``documents-*.parquet`` and removed
ones, with their reason, in ``removed-*.parquet``, so nothing disappears without a trace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

Document = dict[str, Any]
Decision = tuple[Document, str | None]
KEPT_PREFIX = "documents"
REMOVED_PREFIX = "removed"


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


class ShardWriter:
    """Writes rows into numbered parquet shards of at most ``shard_size`` rows."""

    def __init__(self, directory: Path, prefix: str, shard_size: int = 10_000):
        self.directory, self.prefix, self.shard_size = directory, prefix, shard_size
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


def write_stage(decisions: Iterable[Decision], directory: Path, shard_size: int = 10_000) -> Funnel:
    """Drain a stage's decisions into kept and removed shards; returns the funnel."""
    funnel = Funnel()
    kept = ShardWriter(directory, KEPT_PREFIX, shard_size)
    removed = ShardWriter(directory, REMOVED_PREFIX, shard_size)
    for doc, reason in decisions:
        funnel.record(reason)
        if reason is None:
            kept.write(doc)
        else:
            removed.write({**doc, "reason": reason})
    kept.flush()
    removed.flush()
    return funnel


def read_documents(
    directory: Path, prefix: str = KEPT_PREFIX, columns: list[str] | None = None
) -> Iterator[Document]:
    """Documents of an artifact directory in shard order."""
    for path in sorted(directory.glob(f"{prefix}-*.parquet")):
        table = pq.read_table(path, columns=columns)
        yield from table.to_pylist()
