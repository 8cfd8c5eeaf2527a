"""Token cache: train / validation shards of token ids with document offsets, built in parallel and resumably.

Layout of a cache directory::

    cache.json                  the ledger: dtype, vocabulary, EOS, config, each split's shards and counts
    tokenizer.json              the tokenizer that made it (a cache is usable on its own)
    {split}/{chunk:05d}.bin     token ids, each document followed by EOS (uint16, or uint32 past 65,536 ids)
    {split}/{chunk:05d}.ends    uint64 end offset of each document within the shard

One input chunk (see ``text_sources``) makes one shard per split, so the concatenated stream does not
depend on how many workers built it. A document's split is a hash of its id: the same document stays
on the same side when the corpus grows or is re-processed, so validation text is never trained on.
A build of two or more documents always has a validation document (see ``_ensure_validation``).

Resumption: each chunk's shards are written into a work folder, renamed into place, then a
``{chunk}.json`` record is written last; a rerun (after a kill) keeps every chunk with a record and
encodes only the rest. The finished cache is assembled from the work folder into ``out_dir``, which
the caller makes visible atomically (the artifact store, or a rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections import OrderedDict, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from itertools import chain, groupby
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import xxhash
from fsspec.implementations.local import LocalFileSystem
from pydantic import BaseModel, ConfigDict, Field
from tokenizers import Tokenizer

from marin_pipelines.engine import Engine, LocalEngine, Progress
from marin_pipelines.store import version_hash
from marin_pipelines.tokenize.text_sources import TextChunk, find_text_files, read_chunk, text_chunks
from marin_pipelines.tokenize.tokenizer import BOS, EOS, TOKENIZER_FILE, NoText, tokenizer_hash

log = logging.getLogger(__name__)
SPLITS = ("train", "validation")
INFO_FILE = "cache.json"
WORK_FILE = "build.json"
RECORD_FORMAT = 2  # of the chunk records in the work folder; part of the build's fingerprint
# Text per encode_batch_fast call. The tokenizer's threads share out a call's documents, so a call of few
# documents ends with one thread busy on the longest: against the raw encoder on 8 MB of web pages
# (median of 10-16 paired rounds), 256K characters measured 0.84-0.91x, 1M and 2M 0.92-0.96x. Memory
# stays bounded: a batch's Encodings (~90 bytes a token) become ids as soon as it is encoded.
ENCODE_CHARS = 1 << 20
ENCODE_AHEAD = 2  # batches being encoded while one is written
# Shards a split keeps mapped at once, most recently read first: each map holds a file descriptor (Python's
# mmap keeps a copy), and a cache of many small files would otherwise pass the usual limit of 1,024
OPEN_MAPS = 64
Batch = list[tuple[str, str]]  # (id, text) of some documents of one chunk


class CacheConfig(BaseModel):
    """The validation share and the seed of the id hash that assigns each document's split."""

    model_config = ConfigDict(extra="forbid")

    validation_fraction: float = Field(0.05, gt=0, le=0.5, description="expected share of validation docs")
    seed: int = Field(0, ge=0, lt=1 << 64, description="seed of the id hash that assigns splits")


def split_key(doc_id: str, seed: int) -> float:
    """A stable uniform number in [0, 1) for a document id; below validation_fraction -> validation."""
    return (xxhash.xxh64_intdigest(doc_id.encode("utf-8"), seed=seed) >> 11) / 2**53  # 53 bits: exact


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


@dataclass(frozen=True)
class _Job:
    """What a worker needs to encode one chunk into the work folder."""

    chunk: TextChunk
    index: int
    tokenizer_json: str
    work_dir: str
    dtype: str
    eos_id: int
    validation_fraction: float
    seed: int


@dataclass
class CacheBuild:
    """The ledger written as cache.json, and how many chunks this run encoded or found already done."""

    info: dict[str, Any]
    chunks_encoded: int
    chunks_reused: int


def build_cache(
    inputs: list[str],
    tokenizer: Tokenizer,
    out_dir: Path,
    config: CacheConfig,
    work_dir: Path,
    engine: Engine | None = None,
    progress: Progress | None = None,
) -> CacheBuild:
    """Tokenize the text files or folders ``inputs`` into the empty folder ``out_dir``.

    ``work_dir`` keeps finished chunks between runs (a rerun of the same build reuses them; a
    different build clears it) and is removed once ``out_dir`` is complete. ``engine`` encodes the
    chunks: here (one local worker), in a process pool or on a Ray cluster whose workers reach
    ``work_dir`` (a shared folder); the output is the same byte for byte.
    """
    engine = engine or LocalEngine(1)
    eos_id = tokenizer.token_to_id(EOS)
    if eos_id is None:
        raise ValueError(f"tokenizer has no {EOS!r} token, which ends every document")
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    chunks = text_chunks(inputs)
    tokenizer_json = tokenizer.to_str()
    fingerprint = version_hash(
        [RECORD_FORMAT, tokenizer_json, config.model_dump(), [asdict(c) for c in chunks]]
    )
    _prepare_work_dir(work_dir, fingerprint)
    jobs = [
        _Job(c, i, tokenizer_json, str(work_dir), token_dtype(vocab_size).name, eos_id, **config.model_dump())
        for i, c in enumerate(chunks)
    ]
    records = {i: _read_record(work_dir, i) for i in range(len(jobs))}
    todo = [job for job in jobs if records[job.index] is None]
    log.info(f"tokenizing {len(todo)} of {len(jobs)} chunks ({len(jobs) - len(todo)} already done)")
    for record in _encode_all(todo, engine, progress):
        records[record["index"]] = record
    if not any(r[split]["documents"] for r in records.values() for split in SPLITS):
        files = len(find_text_files(inputs))
        raise NoText(f"no documents to tokenize in {', '.join(inputs)} (text files read: {files})")
    info = _assemble(records, work_dir, out_dir, config, vocab_size, eos_id)
    info.update(bos_id=tokenizer.token_to_id(BOS), tokenizer_hash=tokenizer_hash(tokenizer))
    (out_dir / TOKENIZER_FILE).write_text(tokenizer_json)
    (out_dir / INFO_FILE).write_text(json.dumps(info, indent=2))
    shutil.rmtree(work_dir, ignore_errors=True)
    return CacheBuild(info, chunks_encoded=len(todo), chunks_reused=len(jobs) - len(todo))


def _prepare_work_dir(work_dir: Path, fingerprint: str) -> None:
    """Keep the work folder of the same build, start afresh for any other."""
    marker = work_dir / WORK_FILE
    if marker.is_file() and json.loads(marker.read_text()).get("fingerprint") == fingerprint:
        return
    shutil.rmtree(work_dir, ignore_errors=True)
    for split in SPLITS:
        (work_dir / split).mkdir(parents=True)
    _write_atomic(marker, json.dumps({"fingerprint": fingerprint}).encode())


def _read_record(work_dir: Path, index: int) -> dict[str, Any] | None:
    path = work_dir / f"{index:05d}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _encode_all(jobs: list[_Job], engine: Engine, progress: Progress | None) -> Iterator[dict[str, Any]]:
    """Records of the encoded chunks: in this process (the tokenizer's own threads), or one chunk per
    task of the engine, one tokenizer thread each (the tasks are the parallelism)."""
    if isinstance(engine, LocalEngine) and (engine.workers == 1 or len(jobs) <= 1):
        yield from _encode_chunks(jobs)
        return
    if isinstance(engine, LocalEngine):  # no fork of a parent whose tokenizer threads have run
        engine = replace(engine, start_method="spawn")
    yield from engine.map(_encode_chunk_alone, jobs, progress)


def _encode_chunk_alone(job: _Job) -> dict[str, Any]:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before this worker's first encode
    return _encode_chunk(job)


@lru_cache(maxsize=1)
def _tokenizer(tokenizer_json: str) -> Tokenizer:
    """One per process, not one per chunk."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    tokenizer.encode_special_tokens = True  # text is data: a literal EOS string is not the EOS id
    return tokenizer


def _batches(docs: Iterator[tuple[str, str]]) -> Iterator[Batch]:
    """Documents in batches of at least ENCODE_CHARS characters (the last one may be smaller)."""
    batch: Batch = []
    chars = 0
    for doc in docs:
        batch.append(doc)
        chars += len(doc[1])
        if chars >= ENCODE_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _encoded(
    tokenizer: Tokenizer, batches: Iterator[tuple[_Job, Batch]]
) -> Iterator[tuple[_Job, Batch, np.ndarray, np.ndarray]]:
    """The batches with their tokens and document lengths (see ``_token_ids``). The next batches are
    encoded in threads while the caller writes this one (the tokenizer releases the GIL), so the writing
    costs little beyond the encoding; two in flight let the tokenizer's threads start on one while the
    last long document of the other ends."""
    with ThreadPoolExecutor(ENCODE_AHEAD) as pool:
        ahead: deque[tuple[_Job, Batch, Future[tuple[np.ndarray, np.ndarray]]]] = deque()
        for job, batch in batches:
            ahead.append((job, batch, pool.submit(_token_ids, tokenizer, batch, job)))
            if len(ahead) > ENCODE_AHEAD:
                job, batch, encoded = ahead.popleft()
                yield job, batch, *encoded.result()
        for job, batch, encoded in ahead:
            yield job, batch, *encoded.result()


def _token_ids(tokenizer: Tokenizer, batch: Batch, job: _Job) -> tuple[np.ndarray, np.ndarray]:
    """The batch's token ids, each document followed by EOS, in one array, and each document's length
    with its EOS. Done in the encoding thread, so that it overlaps the encoding of the other batch in
    flight, and the Encoding objects (~90 bytes a token) are freed at once."""
    texts = [text for _, text in batch]
    ids = [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    for doc in ids:
        doc.append(job.eos_id)
    lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    return np.fromiter(chain.from_iterable(ids), np.dtype(job.dtype), int(lengths.sum())), lengths


def _encode_chunks(jobs: list[_Job]) -> Iterator[dict[str, Any]]:
    """Encode chunks one after another into the work folder and yield their records. Encoding runs ahead
    into the next chunk, so that reading it and finishing this one overlap encoding too."""
    if not jobs:
        return
    tokenizer = _tokenizer(jobs[0].tokenizer_json)
    batches = ((job, batch) for job in jobs for batch in _batches(read_chunk(job.chunk)))
    groups = groupby(_encoded(tokenizer, batches), key=lambda encoded: encoded[0].index)
    group = next(groups, None)
    for job in jobs:
        if group is not None and group[0] == job.index:
            yield _write_chunk(job, (encoded[1:] for encoded in group[1]))
            group = next(groups, None)
        else:  # a chunk without documents
            yield _write_chunk(job, iter(()))


def _encode_chunk(job: _Job) -> dict[str, Any]:
    """A pool worker's task."""
    (record,) = _encode_chunks([job])
    return record


def _write_chunk(job: _Job, encoded: Iterator[tuple[Batch, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """Write one chunk's shards into the work folder; its record is written last. The record keeps the
    chunk's document with the smallest split key, for ``_ensure_validation``."""
    work = Path(job.work_dir)
    counts = {split: {"documents": 0, "tokens": 0, "text_bytes": 0} for split in SPLITS}
    lowest: dict[str, Any] | None = None  # key, position in the chunk and text bytes of that document
    position = 0
    files = {split: (work / split / f".{job.index:05d}.tmp-{os.getpid()}") for split in SPLITS}
    with files["train"].open("wb") as train_file, files["validation"].open("wb") as val_file:
        outs = {"train": train_file, "validation": val_file}
        ends: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}
        for batch, tokens, lengths in encoded:
            text_bytes = np.fromiter((len(text.encode("utf-8")) for _, text in batch), np.int64, len(batch))
            keys = np.fromiter((split_key(doc_id, job.seed) for doc_id, _ in batch), np.float64, len(batch))
            first = int(keys.argmin())
            if lowest is None or keys[first] < lowest["key"]:
                lowest = {
                    "key": float(keys[first]),
                    "document": position + first,
                    "text_bytes": int(text_bytes[first]),
                }
            position += len(batch)
            to_val = keys < job.validation_fraction
            for split, chosen in (("train", ~to_val), ("validation", to_val)):
                if not chosen.any():
                    continue
                part = tokens if chosen.all() else tokens[np.repeat(chosen, lengths)]
                outs[split].write(part.tobytes())
                c = counts[split]
                ends[split].append(c["tokens"] + np.cumsum(lengths[chosen]).astype(np.uint64))
                c["documents"] += int(chosen.sum())
                c["tokens"] += len(part)
                c["text_bytes"] += int(text_bytes[chosen].sum())
    for split in SPLITS:
        final = work / split / f"{job.index:05d}"
        if counts[split]["documents"]:
            os.replace(files[split], final.with_suffix(".bin"))
            _write_atomic(final.with_suffix(".ends"), np.concatenate(ends[split]).tobytes())
        else:
            files[split].unlink()
    record = {"index": job.index, "chunk": asdict(job.chunk), **counts, "lowest": lowest}
    _write_atomic(work / f"{job.index:05d}.json", json.dumps(record).encode())
    return record


def _assemble(
    records: dict[int, dict[str, Any]],
    work_dir: Path,
    out_dir: Path,
    config: CacheConfig,
    vocab_size: int,
    eos_id: int,
) -> dict[str, Any]:
    """Move the chunks' shards into ``out_dir`` (hard links when possible) and return the ledger."""
    for split in SPLITS:
        (out_dir / split).mkdir()
    rewritten = _ensure_validation(records, work_dir, out_dir, token_dtype(vocab_size))
    splits: dict[str, Any] = {}
    for split in SPLITS:
        shards = []
        for index in sorted(records):
            counts = records[index][split]
            if not counts["documents"]:
                continue
            name = f"{split}/{index:05d}"
            for file in (f"{name}.bin", f"{name}.ends") if index != rewritten else ():
                try:
                    os.link(work_dir / file, out_dir / file)
                except OSError:  # another filesystem
                    shutil.copyfile(work_dir / file, out_dir / file)
            shards.append({"name": name, **counts})
        totals = {key: sum(s[key] for s in shards) for key in ("documents", "tokens", "text_bytes")}
        splits[split] = {**totals, "shards": shards}
    if not splits["train"]["documents"] + splits["validation"]["documents"]:
        raise ValueError("no documents to tokenize")
    return {
        "dtype": token_dtype(vocab_size).name,
        "vocab_size": vocab_size,
        "eos_id": eos_id,
        "splits": splits,
        "config": config.model_dump(),
    }


def _ensure_validation(
    records: dict[int, dict[str, Any]], work_dir: Path, out_dir: Path, dtype: np.dtype
) -> int | None:
    """When the hash split left validation empty, move one document there, so that evals have held-out
    text; return the chunk whose shards this wrote into ``out_dir`` (its ``records`` entry is updated).

    The document moved has the smallest split key of the build: the one the hash rule would move first if
    validation_fraction grew, so validation stays "the documents with the smallest keys", a choice that
    depends on the document ids only, not on chunks or workers. A single document stays in train.
    """
    documents = sum(r[split]["documents"] for r in records.values() for split in SPLITS)
    if documents < 2 or any(r["validation"]["documents"] for r in records.values()):
        return None
    index = min((i for i in records if records[i]["lowest"]), key=lambda i: (records[i]["lowest"]["key"], i))
    record, lowest = records[index], records[index]["lowest"]
    stem, doc = f"{index:05d}", lowest["document"]
    tokens = np.fromfile(work_dir / "train" / f"{stem}.bin", dtype)
    ends = np.fromfile(work_dir / "train" / f"{stem}.ends", np.uint64)
    start, stop = (int(ends[doc - 1]) if doc else 0), int(ends[doc])
    (out_dir / "validation" / f"{stem}.bin").write_bytes(tokens[start:stop].tobytes())
    (out_dir / "validation" / f"{stem}.ends").write_bytes(np.array([stop - start], np.uint64).tobytes())
    rest_ends = np.delete(ends, doc)
    rest_ends[doc:] -= np.uint64(stop - start)
    if len(rest_ends):
        (out_dir / "train" / f"{stem}.bin").write_bytes(np.delete(tokens, slice(start, stop)).tobytes())
        (out_dir / "train" / f"{stem}.ends").write_bytes(rest_ends.tobytes())
    moved = {"documents": 1, "tokens": stop - start, "text_bytes": lowest["text_bytes"]}
    record["validation"] = moved
    record["train"] = {key: record["train"][key] - moved[key] for key in moved}
    return index


class TokenSplit:
    """One split of a cache as a single token stream over its shards, read in place (memory maps on
    local disk, ranged reads through fsspec elsewhere). ``np.asarray(split)`` loads it whole."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, dtype: np.dtype, ledger: dict[str, Any]):
        self.fs, self.root, self.dtype = fs, root, dtype
        self.local = isinstance(fs, LocalFileSystem)
        self._maps: OrderedDict[int, np.memmap] = OrderedDict()  # shard -> its map, least recently read first
        self.shards: list[dict[str, Any]] = ledger["shards"]
        self.starts = np.cumsum([0] + [s["tokens"] for s in self.shards])  # token offset of each shard
        self.doc_starts = np.cumsum([0] + [s["documents"] for s in self.shards])
        self.num_documents = int(self.doc_starts[-1])
        self._ends: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self.windows(np.zeros(1, np.int64), len(self))[0] if len(self) else np.zeros(0, np.int32)
        return whole.astype(dtype or self.dtype)

    def _path(self, shard: int, suffix: str) -> str:
        return f"{self.root}/{self.shards[shard]['name']}{suffix}"

    def _map(self, shard: int) -> np.memmap:
        """The shard's memory map, opened on first use; the least recently read one closed past
        ``OPEN_MAPS``."""
        if shard in self._maps:
            self._maps.move_to_end(shard)
            return self._maps[shard]
        if len(self._maps) >= OPEN_MAPS:
            self._maps.popitem(last=False)  # unmapped, and its descriptor closed, as the last reference goes
        self._maps[shard] = found = np.memmap(self._path(shard, ".bin"), self.dtype, mode="r")
        return found

    def windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        """``(len(starts), length)`` int32 tokens: row i is the stream from ``starts[i]`` on."""
        out = np.empty((len(starts), length), np.int32)
        pieces = []  # (row, column, shard, first token, stop token)
        for row, start in enumerate(starts.tolist()):
            stop = start + length
            if start < 0 or stop > len(self):
                raise IndexError(f"tokens {start}..{stop} are outside this split of {len(self)} tokens")
            shard, column = int(np.searchsorted(self.starts, start, "right")) - 1, 0
            while start < stop:
                end = min(stop, int(self.starts[shard + 1]))
                base = int(self.starts[shard])
                pieces.append((row, column, shard, start - base, end - base))
                column, start, shard = column + end - start, end, shard + 1
        if self.local:
            for row, column, shard, lo, hi in pieces:
                out[row, column : column + hi - lo] = self._map(shard)[lo:hi]
            return out
        size = self.dtype.itemsize
        blobs = self.fs.cat_ranges(
            [self._path(p[2], ".bin") for p in pieces],
            [p[3] * size for p in pieces],
            [p[4] * size for p in pieces],
        )
        for (row, column, _, lo, hi), blob in zip(pieces, blobs, strict=True):
            out[row, column : column + hi - lo] = np.frombuffer(blob, self.dtype)
        return out

    def document(self, index: int) -> np.ndarray:
        """Token ids of document ``index`` of this split, without its EOS."""
        if not 0 <= index < self.num_documents:
            raise IndexError(f"document {index} is outside this split of {self.num_documents} documents")
        shard = int(np.searchsorted(self.doc_starts, index, "right")) - 1
        if shard not in self._ends:
            blob = self.fs.cat_file(self._path(shard, ".ends"))
            self._ends[shard] = np.frombuffer(blob, np.uint64).astype(np.int64)
        ends, i = self._ends[shard], index - int(self.doc_starts[shard])
        start = int(ends[i - 1]) if i else 0
        base = int(self.starts[shard])
        return self.windows(np.array([base + start]), int(ends[i]) - start - 1)[0]


class TokenCache:
    """A built cache, local or at any fsspec URL (``gs://``, ``memory://``): ``.train``, ``.validation``
    (``TokenSplit``s) and ``.info`` (the ledger)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.url = str(path)
        fs, root = fsspec.core.url_to_fs(self.url)
        if not fs.isfile(f"{root}/{INFO_FILE}"):
            raise FileNotFoundError(f"not a token cache (no {INFO_FILE}): {self.url}")
        self.info: dict[str, Any] = json.loads(fs.cat_file(f"{root}/{INFO_FILE}"))
        dtype = np.dtype(self.info["dtype"])
        self.train = TokenSplit(fs, root, dtype, self.info["splits"]["train"])
        self.validation = TokenSplit(fs, root, dtype, self.info["splits"]["validation"])

    @property
    def identity(self) -> str:
        """A short hash of the ledger: each shard's document, token and byte counts, the split's config and
        the tokenizer's hash. Other text, another tokenizer or another split gives another identity, and
        no token is read: a forecast records it so that later runs can check they train on the same data."""
        return hashlib.sha256(json.dumps(self.info, sort_keys=True).encode()).hexdigest()[:16]

    def split(self, name: str) -> TokenSplit:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; choose one of {SPLITS}")
        return getattr(self, name)
