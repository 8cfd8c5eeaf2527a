"""Dedup that scales out: ``deduplicate``'s decisions as map steps over document shards and hash partitions.

Every step is ``map_units`` on the engine (a local process pool or Ray): any engine and any number of workers
write the same bytes, and a rerun does only the units without a done record. A document's stream position is
(input shard, row), packed as ``shard << 32 | row``: the order ``deduplicate`` reads, so first-wins decisions
are the same. Keys (paragraph hashes, band keys) are 64-bit hashes; key ``k`` belongs to partition
``k % partitions``. A partition's task holds that share of the snapshot's keys and reads only that partition
of each earlier snapshot's index, so no process ever loads a whole index.

1. keys (shards): each document's distinct paragraph keys, as (key, position) pairs per partition.
2. paragraphs (partitions): a key's occurrences after its first position, and every occurrence of a key an
   earlier snapshot has, are seen: those drops go back to their shards; the keys new to this snapshot are its
   paragraph index. (A line repeated within one document counts once: it is not seen by itself.)
3. signatures (shards): a document whose every paragraph is seen is an exact duplicate; the others (the
   candidates) get their MinHash band keys (of the full text), which go to their partitions. As in
   ``deduplicate``, exact duplicates are never hashed: MinHash is the costliest part.
4. buckets (partitions): candidates grouped by band key; a bucket of two or more, or whose key is in the
   earlier snapshots' band index, collides.
5. clusters (one task, as in datatrove): the documents sharing colliding buckets form a graph; its connected
   components are counted, and its documents decided in stream order with ``deduplicate``'s greedy first-wins
   rule: a document is a near duplicate if one of its buckets holds a kept earlier document ("this snapshot",
   checked first) or an earlier snapshot's ("an earlier snapshot"); otherwise it is kept and claims its
   buckets. Components share no bucket, so they could be decided apart with the same result. Removing all but
   the first document of each component (datatrove's and Marin's rule) would not be the same: on a chain
   A~B~C where A and C share no band, B goes and C stays (C copies no kept document), but it would drop C too.
6. filter (shards): kept documents lose their seen paragraphs; kept and removed shards (reason and ``detail``)
   go into ``work``, and the kept documents' band keys to their partitions.
7. index (partitions): ``index/paragraphs/part-PPPPP.npy`` and ``index/bands/part-PPPPP.npy``, this
   snapshot's new keys, sorted unique uint64: what later snapshots read, one partition per task.

Intermediates are uint64 arrays under ``work/_shuffle``, one file per task and step holding a group per
destination (``_save_groups``), removed at the end. A task's memory is about
the snapshot's pairs / partitions plus the earlier index / partitions; the cluster task holds the colliding
documents only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from marin_pipelines.documents import Decision, Funnel, list_shards, read_shard, write_stage
from marin_pipelines.engine import Engine, LocalEngine, Progress, finish_units, map_units
from marin_pipelines.text.deduplicated_text import (
    EXACT,
    NEAR,
    DedupConfig,
    MinHasher,
    paragraph_keys,
    removal,
    without_lines,
)

SHUFFLE = "_shuffle"
INDEX = "index"
INDEX_KINDS = ("paragraphs", "bands")
_ROW_BITS = 32  # position = shard << 32 | row
_ROW_MASK = np.uint64(2**_ROW_BITS - 1)


@dataclass(frozen=True)
class _Plan:
    """What every task needs to find its inputs; it travels to the workers with the task."""

    config: DedupConfig
    work: str
    units: int
    earlier: tuple[str, ...]

    @property
    def partitions(self) -> int:
        return self.config.partitions

    def shuffle(self, *names: str) -> str:
        return "/".join([self.work, SHUFFLE, *names])


def deduplicate_snapshot(
    source: str,
    work: str,
    config: DedupConfig,
    earlier: Sequence[str] = (),
    engine: Engine | None = None,
    progress: Callable[[str], Progress] | None = None,
) -> dict[str, Any]:
    """Dedup the kept shards of ``source`` against themselves and the indexes of the ``earlier`` snapshots'
    dedup outputs (folders or URLs, in order), with the same decisions as ``deduplicate`` over the stream.

    Writes the kept and removed shards and this snapshot's index into ``work``; returns the metadata.
    """
    shards = list_shards(source)
    plan = _Plan(config, str(work).rstrip("/"), len(shards), tuple(str(e).rstrip("/") for e in earlier))
    for snapshot in plan.earlier:
        _check_index(snapshot, config.partitions)
    partitions = list(range(config.partitions))
    folders: list[str] = []

    def step(name: str, task: Callable[..., Any], inputs: Sequence[Any], folder: str) -> list[Any]:
        folders.append(folder)
        report = progress(name) if progress else None
        return map_units(running, partial(task, plan), inputs, folder, report)

    with (engine or LocalEngine(1)).session() as running:  # one pool (or connection) for the seven steps
        step("keys", _keys, shards, plan.shuffle("keys"))
        step("paragraphs", _paragraphs, partitions, plan.shuffle("paragraphs"))
        step("signatures", _signatures, shards, plan.shuffle("signatures"))
        step("buckets", _buckets, partitions, plan.shuffle("buckets"))
        (clusters,) = step("clusters", _clusters, [None], plan.shuffle("clusters"))
        funnels = step("filter", _filter, shards, plan.work)
        index = step("index", _index, partitions, f"{plan.work}/{INDEX}")
    for folder in folders:
        finish_units(folder)
    fs, root = fsspec.core.url_to_fs(plan.shuffle())
    if fs.exists(root):
        fs.rm(root, recursive=True)
    return {
        "funnel": sum((Funnel.from_dict(f) for f in funnels), Funnel()).as_dict(),
        "earlier_snapshots": len(plan.earlier),
        "index_paragraphs": sum(part["paragraphs"] for part in index),
        "index_band_keys": sum(part["bands"] for part in index),
        "partitions": config.partitions,
        "colliding_documents": clusters["documents"],
        "components": clusters["components"],
        "largest_component": clusters["largest_component"],
    }


def _keys(plan: _Plan, unit: int, url: str, scratch: Path) -> dict[str, int]:
    """Per shard: (key, position) of each document's distinct paragraph keys, by partition, and how many
    each document has (``counts``)."""
    texts = [doc["text"] for doc in read_shard(url, columns=["text"])]
    pairs, counts = [], []
    for row, text in enumerate(texts):
        keys = sorted(set(paragraph_keys(text)[1].values())) if plan.config.exact_paragraphs else []
        pairs.extend((key, unit << _ROW_BITS | row) for key in keys)
        counts.append(len(keys))
    _save_groups(scratch / f"paragraphs-{_unit(unit)}", _by_partition(_rows(pairs, 2), plan))
    _save(scratch / f"counts-{_unit(unit)}", _rows(counts, 1)[:, 0])
    return {"documents": len(texts)}


def _paragraphs(plan: _Plan, unit: int, p: int, scratch: Path) -> dict[str, int]:
    """Per partition: the seen occurrences (position, key, first seen in this snapshot), by shard, and the
    keys new to this snapshot."""
    pairs = _gather((plan.shuffle("keys", f"paragraphs-{_unit(u)}") for u in range(plan.units)), p, 2)
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    keys, positions = pairs[:, 0], pairs[:, 1]
    first = _starts(keys)
    old = np.isin(keys, _earlier_index(plan, "paragraphs", p))
    here = (~old & ~first).astype(np.uint64)
    drops = np.column_stack([positions, keys, here])[old | ~first]
    _save_groups(scratch / f"drops-{_part(p)}", _by_unit(drops, plan))
    new = keys[first & ~old]
    _save(scratch / f"new-{_part(p)}", new)
    return {"new_keys": len(new)}


def _signatures(plan: _Plan, unit: int, url: str, scratch: Path) -> dict[str, int]:
    """Per shard: the exact duplicates (row, copy in this snapshot) and the seen paragraphs (row, key); the
    other documents' band keys, one row each (``bands``), and as (key, position) pairs by partition."""
    counts = _load(plan.shuffle("keys", f"counts-{_unit(unit)}"))
    drops = _gather(
        (plan.shuffle("paragraphs", f"drops-{_part(p)}") for p in range(plan.partitions)), unit, 3
    )
    rows = drops[:, 0] & _ROW_MASK
    dropped = np.bincount(rows.astype(np.int64), minlength=len(counts))
    here = np.bincount(rows[drops[:, 2] == 1].astype(np.int64), minlength=len(counts)) > 0
    exact = dropped == counts if plan.config.exact_paragraphs else np.zeros(len(counts), bool)
    _save(scratch / f"removed-{_unit(unit)}", np.column_stack([np.flatnonzero(exact), here[exact]]))
    _save(scratch / f"drops-{_unit(unit)}", np.column_stack([rows, drops[:, 1]]))
    candidates = np.flatnonzero(~exact)
    bands = _rows([], 0, len(candidates))
    if plan.config.fuzzy:
        hasher = MinHasher(plan.config)
        texts = read_shard(url, columns=["text"])
        bands = _rows(
            [hasher.band_keys(hasher.signature(texts[row]["text"])) for row in candidates], hasher.bands
        )
    _save(scratch / f"bands-{_unit(unit)}", bands)
    positions = np.uint64(unit << _ROW_BITS) | candidates.astype(np.uint64)
    pairs = np.column_stack([bands.ravel(), np.repeat(positions, bands.shape[1])])
    pairs = np.unique(pairs, axis=0)  # a document's band keys once each
    _save_groups(scratch / f"band_pairs-{_unit(unit)}", _by_partition(pairs, plan))
    return {"exact_duplicates": int(exact.sum())}


def _buckets(plan: _Plan, unit: int, p: int, scratch: Path) -> dict[str, int]:
    """Per partition: the colliding buckets, as (bucket, position) members and a flag per bucket for a hit in
    the earlier snapshots' band index."""
    pairs = _gather((plan.shuffle("signatures", f"band_pairs-{_unit(u)}") for u in range(plan.units)), p, 2)
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    starts = np.flatnonzero(_starts(pairs[:, 0]))
    sizes = np.diff(np.append(starts, len(pairs)))
    hit = np.isin(pairs[starts, 0], _earlier_index(plan, "bands", p))
    collides = (sizes >= 2) | hit
    bucket = np.repeat(np.cumsum(collides) - 1, sizes)
    members = np.repeat(collides, sizes)
    _save(
        scratch / f"members-{_part(p)}",
        np.column_stack([bucket[members].astype(np.uint64), pairs[members, 1]]),
    )
    _save(scratch / f"earlier-{_part(p)}", hit[collides])
    return {"buckets": int(collides.sum())}


def _clusters(plan: _Plan, unit: int, _: None, scratch: Path) -> dict[str, int]:
    """The near duplicates (row, copy in this snapshot), by shard, and the size of the collision graph."""
    members, earlier, count = [], [], 0
    for p in range(plan.partitions):
        part = _load(plan.shuffle("buckets", f"members-{_part(p)}"))
        part[:, 0] += np.uint64(count)
        members.append(part)
        earlier.append(_load(plan.shuffle("buckets", f"earlier-{_part(p)}")))
        count += len(earlier[-1])
    pairs = np.concatenate(members)
    positions, doc = np.unique(pairs[:, 1], return_inverse=True)  # colliding documents, in stream order
    bucket = pairs[:, 0].astype(np.int64)
    components, sizes = _components(doc, bucket, len(positions), count)
    order = np.lexsort((bucket, doc))
    bounds = np.searchsorted(doc[order], np.arange(len(positions) + 1)).tolist()
    buckets_of, hits = bucket[order].tolist(), np.concatenate(earlier).astype(bool).tolist()
    claimed, near = [False] * count, []
    for d, position in enumerate(positions.tolist()):
        buckets = buckets_of[bounds[d] : bounds[d + 1]]
        if any(claimed[b] for b in buckets):
            near.append((position, 1))
        elif any(hits[b] for b in buckets):
            near.append((position, 0))
        else:
            for b in buckets:
                claimed[b] = True
    near_rows = _rows(near, 2)
    units = near_rows[:, 0] >> np.uint64(_ROW_BITS)
    near_rows[:, 0] &= _ROW_MASK
    _save_groups(scratch / "near", _split(near_rows, units, plan.units))
    return {
        "documents": len(positions),
        "components": components,
        "largest_component": int(sizes.max(initial=0)),
    }


def _filter(plan: _Plan, unit: int, url: str, scratch: Path) -> dict[str, Any]:
    """Per shard: the kept and removed shards, and the kept documents' band keys by partition (published into
    ``work/_shuffle/kept``)."""
    exact = dict(_load(plan.shuffle("signatures", f"removed-{_unit(unit)}")).tolist())
    near = dict(_load_group(plan.shuffle("clusters", "near"), unit, 2).tolist())
    seen: dict[int, set[int]] = {}
    for row, key in _load(plan.shuffle("signatures", f"drops-{_unit(unit)}")).tolist():
        seen.setdefault(row, set()).add(key)
    docs = read_shard(url)

    def decisions() -> Iterator[Decision]:
        for row, doc in enumerate(docs):
            if row in exact:
                yield removal(doc, EXACT, this_snapshot=bool(exact[row]))
            elif row in near:
                yield removal(doc, NEAR, this_snapshot=bool(near[row]))
            else:
                text = doc["text"]
                if plan.config.exact_paragraphs:
                    lines, keys = paragraph_keys(text)
                    dropped = seen.get(row, set())
                    text = without_lines(lines, {i for i, key in keys.items() if key in dropped})
                yield {**doc, "text": text}, None

    funnel = write_stage(decisions(), scratch, unit=unit)
    candidate = np.ones(len(docs), bool)  # the rows that have band keys
    candidate[list(exact)] = False
    kept = candidate.copy()
    kept[list(near)] = False
    bands = np.unique(_load(plan.shuffle("signatures", f"bands-{_unit(unit)}"))[kept[candidate]])
    _save_groups(scratch / SHUFFLE / f"kept-{_unit(unit)}", _by_partition(bands, plan))
    return funnel.as_dict()


def _index(plan: _Plan, unit: int, p: int, scratch: Path) -> dict[str, int]:
    """Per partition: this snapshot's index, its new paragraph keys and its kept documents' band keys."""
    paragraphs = _load(plan.shuffle("paragraphs", f"new-{_part(p)}"))
    bands = np.unique(_gather((plan.shuffle(f"kept-{_unit(u)}") for u in range(plan.units)), p, 0))
    _save(scratch / "paragraphs" / _part(p), paragraphs)
    _save(scratch / "bands" / _part(p), bands)
    return {"paragraphs": len(paragraphs), "bands": len(bands)}


def _check_index(earlier: str, partitions: int) -> None:
    """An earlier snapshot's index must have this config's partitions, or its keys sit in other partitions."""
    fs, root = fsspec.core.url_to_fs(earlier)
    expected = {f"{_part(p)}.npy" for p in range(partitions)}
    for kind in INDEX_KINDS:
        found = {name.rsplit("/", 1)[-1] for name in fs.glob(f"{root}/{INDEX}/{kind}/part-*.npy")}
        if missing := sorted(expected - found):
            raise FileNotFoundError(
                f"{earlier}/{INDEX}/{kind}/{missing[0]}: missing from the dedup index of an earlier snapshot "
                f"({len(found & expected)} of its {partitions} partitions are there)"
            )
        if found != expected:
            raise ValueError(
                f"{earlier}/{INDEX}/{kind} has {len(found)} partitions, this dedup {partitions}: the earlier "
                "snapshots must be deduplicated with the same partitions"
            )


def _earlier_index(plan: _Plan, kind: str, p: int) -> np.ndarray:
    """Partition ``p`` of the earlier snapshots' ``kind`` index: the only part of it a task reads."""
    arrays = []
    for snapshot in plan.earlier:
        url = f"{snapshot}/{INDEX}/{kind}/{_part(p)}"
        try:
            arrays.append(_load(url))
        except FileNotFoundError as error:
            raise FileNotFoundError(
                f"{url}.npy: missing from the dedup index of an earlier snapshot"
            ) from error
    return np.concatenate(arrays) if arrays else np.empty(0, np.uint64)


def _components(doc: np.ndarray, bucket: np.ndarray, documents: int, buckets: int) -> tuple[int, np.ndarray]:
    """How many connected components the documents form through shared buckets, and each one's size."""
    if not documents:
        return 0, np.zeros(0, np.int64)
    nodes = documents + buckets  # documents, then buckets: an edge joins a document to each of its buckets
    graph = coo_matrix((np.ones(len(doc), np.int8), (doc, documents + bucket)), shape=(nodes, nodes))
    count, labels = connected_components(graph, directed=False)
    return count, np.bincount(labels[:documents], minlength=count)


def _starts(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal values in the sorted ``keys`` starts (a mask)."""
    starts = np.ones(len(keys), bool)
    starts[1:] = keys[1:] != keys[:-1]
    return starts


def _by_partition(rows: np.ndarray, plan: _Plan) -> list[np.ndarray]:
    """``rows`` (keys, or rows starting with the key) routed to the key's partition."""
    keys = rows if rows.ndim == 1 else rows[:, 0]
    return _split(rows, keys % np.uint64(plan.partitions), plan.partitions)


def _by_unit(rows: np.ndarray, plan: _Plan) -> list[np.ndarray]:
    """``rows`` starting with a position, routed to the position's shard."""
    return _split(rows, rows[:, 0] >> np.uint64(_ROW_BITS), plan.units)


def _split(rows: np.ndarray, labels: np.ndarray, n: int) -> list[np.ndarray]:
    """``rows`` grouped by ``labels`` (0 to n - 1), each group in its original order."""
    labels = labels.astype(np.int64)
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(n + 1))
    return [rows[order[start:end]] for start, end in itertools.pairwise(bounds)]


def _rows(values: Sequence[Any], width: int, count: int = -1) -> np.ndarray:
    """uint64 rows of ``width`` columns, also when there are none (then ``count`` says how many)."""
    return np.array(values, dtype=np.uint64).reshape(count, width)


def _gather(urls: Iterable[str], group: int, width: int) -> np.ndarray:
    """Group ``group`` of each grouped file at ``urls``, end to end: rows of ``width`` columns (0: one value
    each)."""
    arrays = [_load_group(url, group, width) for url in urls]
    if arrays:
        return np.concatenate(arrays)
    return np.empty((0, width) if width else 0, np.uint64)


def _part(p: int) -> str:
    return f"part-{p:05d}"


def _unit(u: int) -> str:
    return f"unit-{u:05d}"


def _save(path: Path, array: np.ndarray) -> None:
    """``path`` (without its ``.npy``) as uint64: every shuffle and index file holds keys or positions."""
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True)
    np.save(path.with_name(f"{path.name}.npy"), np.ascontiguousarray(array, dtype=np.uint64))


def _save_groups(path: Path, groups: list[np.ndarray]) -> None:
    """The groups a task sends to every partition (or shard) in ONE file, ``path.groups``: a header (groups,
    columns), each group's start row, then the rows (uint64). One file per task and step, not one per
    destination: shards x partitions small files would make the shuffle cost more than the dedup."""
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True)
    width = groups[0].shape[1] if groups and groups[0].ndim == 2 else 0
    starts = np.cumsum([0, *(len(g) for g in groups)], dtype=np.uint64)
    with open(path.with_name(f"{path.name}.groups"), "wb") as f:
        f.write(np.array([len(groups), width], np.uint64).tobytes())
        f.write(starts.tobytes())
        for group in groups:
            f.write(np.ascontiguousarray(group, dtype=np.uint64).tobytes())


def _load_group(url: str, group: int, width: int) -> np.ndarray:
    """One group of a grouped file: the header, then only that group's bytes (a range read on a bucket)."""
    fs, path = fsspec.core.url_to_fs(f"{url}.groups")
    row = 8 * max(width, 1)
    with fs.open(path, "rb") as f:
        count, _ = np.frombuffer(f.read(16), np.uint64)
        f.seek(16 + 8 * group)
        start, end = (int(v) for v in np.frombuffer(f.read(16), np.uint64))
        f.seek(16 + 8 * (int(count) + 1) + start * row)
        values = np.frombuffer(f.read((end - start) * row), np.uint64)
    return values.reshape(-1, width) if width else values


def _load(url: str) -> np.ndarray:
    """The ``.npy`` file at ``url`` (given without its suffix), from a local path or a bucket."""
    fs, path = fsspec.core.url_to_fs(f"{url}.npy")
    with fs.open(path, "rb") as f:
        return np.load(f)
