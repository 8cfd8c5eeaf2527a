"""deduplicated_text: exact paragraph deduplication, then fuzzy document deduplication (MinHash LSH).

Both passes are streaming and first-wins: the stream order decides which copy survives, so the result
is deterministic for a given input order (and a later snapshot never displaces an earlier one).

1. Exact paragraphs: every line is a paragraph (extraction puts each block on its own line). Lines
   are normalised (lower case, whitespace collapsed) and hashed with xxh3-64; a line already seen in
   an earlier document is dropped. Repeats within one document are left to the repetition filter.
   A document with nothing left is an ``exact_duplicate``.
2. Near duplicates: a MinHash signature of the word 5-grams of the document's whole text, split into
   bands; a document that shares a band with an earlier kept document is a ``near_duplicate``. The
   signature is taken before paragraph removal: a near copy whose unchanged paragraphs were just
   dropped would otherwise survive as a fragment of its few edited paragraphs.

Across crawl snapshots, each snapshot's output keeps its index (the paragraph hashes and band keys it
added, in hash partitions: ``index/{paragraphs,bands}/part-PPPPP.npy``); a snapshot is deduplicated
against the indexes of every snapshot before it, exactly as if the snapshots were one stream in key order.

``deduplicate`` is the single-process reference semantics; the stage runs the same decisions as map steps
over shards and hash partitions (``dedup_partitions.deduplicate_snapshot``, re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.documents import Decision, Document

_MAX_64 = np.uint64(2**64 - 1)
_WORD = re.compile(r"\w+")
_BLANK_RUNS = re.compile(r"\n{3,}")
_CHUNK = 4096
EXACT, NEAR = "exact_duplicate", "near_duplicate"
_DETAIL = {EXACT: "every paragraph seen in {}", NEAR: "near copy seen in {}"}


class DedupConfig(BaseModel):
    """Deduplication settings.

    Two documents with word 5-gram Jaccard similarity J share at least one of ``bands`` bands of
    ``rows`` MinHash values with probability ``P(J) = 1 - (1 - J**rows) ** bands``. The goal is to
    remove at least 95 % of near copies at J >= 0.8 while keeping distinct pages:

    =============================  ======  ======  ======  ======  ======  ======
    bands x rows (hashes)           J=0.3   J=0.5   J=0.6   J=0.7   J=0.8   J=0.85
    =============================  ======  ======  ======  ======  ======  ======
    14 x 8 (112, FineWeb)          0.001   0.053   0.211   0.565   0.924   0.988
    26 x 11 (286, Marin)           0.000   0.013   0.090   0.405   0.903   0.991
    **20 x 8 (160, ours)**         0.001   0.075   0.287   0.695   0.975   0.998
    =============================  ======  ======  ======  ======  ======  ======

    FineWeb's and Marin's curves sit at 0.92 and 0.90 at J = 0.8: below the 0.95 recall asked for
    there. 20 x 8 keeps FineWeb's row count (so the curve stays as steep, threshold
    ``(1/20)**(1/8) = 0.69``) and adds six bands, which lifts P(0.8) to 0.975 for 43 % more hashing.
    Distinct web pages sit far below J = 0.3 (shared boilerplate is mostly gone after extraction),
    where the false-candidate rate stays near 0.1 %. ``seed`` fixes the hash functions, so signatures
    and band keys are reproducible, and comparable across snapshots.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    exact_paragraphs: bool = Field(
        True, description="drop lines (paragraphs) already seen in an earlier document"
    )
    fuzzy: bool = Field(True, description="drop near duplicates of an earlier kept document (MinHash LSH)")
    ngram: int = Field(5, ge=1, description="words per shingle of the MinHash signature")
    bands: int = Field(
        20, ge=1, description="LSH bands: a document sharing any band with an earlier one is a near duplicate"
    )
    rows: int = Field(8, ge=1, description="MinHash values per band")
    seed: int = Field(
        1,
        ge=0,
        description="seed of the MinHash hash functions (fixes signatures and band keys across snapshots)",
    )
    partitions: int = Field(
        4,
        ge=1,
        description="hash partitions of the scaled-out dedup and of the index it keeps: each reduce task "
        "holds 1/partitions of the snapshot's keys and of the earlier snapshots' index; about 1024 for a "
        "Common Crawl snapshot. Shapes the index layout, not the results",
    )


@dataclass
class DedupIndex:
    """What the reference dedup has seen: normalised paragraph hashes and MinHash band keys (64-bit each).

    ``earlier_*`` are sorted arrays of what the snapshots before this one saw (searched by bisection);
    the sets collect the keys first seen in this stream, which is what a snapshot's index stores. The
    stage never holds a whole index: it reads one hash partition per task (``dedup_partitions``).
    """

    earlier_paragraphs: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    earlier_bands: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    paragraphs: set[int] = field(default_factory=set)
    bands: set[int] = field(default_factory=set)

    def add_paragraphs(self, keys: list[int]) -> tuple[list[bool], bool]:
        """Which keys were seen before (then records them), and whether every seen one is from earlier."""
        earlier = _in_sorted(self.earlier_paragraphs, keys)
        here = [key in self.paragraphs for key in keys]
        self.paragraphs.update(key for key, old in zip(keys, earlier, strict=True) if not old)
        seen = [a or b for a, b in zip(earlier, here, strict=True)]
        return seen, not any(here)

    def match_bands(self, keys: list[int]) -> bool | None:
        """Where a document sharing a band was seen: this snapshot (True), an earlier one (False), or None."""
        if any(key in self.bands for key in keys):
            return True
        return False if any(_in_sorted(self.earlier_bands, keys)) else None


def deduplicate(
    docs: Iterable[Document], config: DedupConfig | None = None, index: DedupIndex | None = None
) -> Iterator[Decision]:
    """One decision per document; kept documents lose the paragraphs seen in earlier documents.

    ``index`` holds what earlier snapshots saw and collects what this stream sees; removed documents
    say in ``detail`` whether their copy is in this snapshot or an earlier one.
    """
    config = config or DedupConfig()
    index = index if index is not None else DedupIndex()
    hasher = MinHasher(config)
    for doc in docs:
        text = doc["text"]
        if config.exact_paragraphs:
            text, only_earlier = _drop_seen_paragraphs(text, index)
            if not text:
                yield removal(doc, EXACT, this_snapshot=not only_earlier)
                continue
        if config.fuzzy:
            bands = hasher.band_keys(hasher.signature(doc["text"]))
            if (here := index.match_bands(bands)) is not None:
                yield removal(doc, NEAR, this_snapshot=here)
                continue
            index.bands.update(bands)
        yield {**doc, "text": text}, None


def removal(doc: Document, reason: str, this_snapshot: bool) -> Decision:
    """A removed document, with ``detail`` saying whether its copy is in this snapshot or an earlier one."""
    where = "this snapshot" if this_snapshot else "an earlier snapshot"
    return {**doc, "detail": _DETAIL[reason].format(where)}, reason


def paragraph_keys(text: str) -> tuple[list[str], dict[int, int]]:
    """The text's lines, and the key of each non-blank line by line number: xxh3-64 of the line lower-cased
    with its whitespace collapsed, so that a paragraph matches its copies whatever their case and spacing."""
    lines = text.split("\n")
    keys = {
        i: xxhash.xxh3_64_intdigest(" ".join(line.lower().split()).encode())
        for i, line in enumerate(lines)
        if line.strip()
    }
    return lines, keys


def without_lines(lines: list[str], dropped: Collection[int]) -> str:
    """The text left when the ``dropped`` line numbers go (the blank runs they leave collapse)."""
    kept = [line for i, line in enumerate(lines) if i not in dropped]
    return _BLANK_RUNS.sub("\n\n", "\n".join(kept)).strip()


def _drop_seen_paragraphs(text: str, index: DedupIndex) -> tuple[str, bool]:
    lines, keys = paragraph_keys(text)
    seen, only_earlier = index.add_paragraphs(list(keys.values()))
    return without_lines(lines, {i for i, old in zip(keys, seen, strict=True) if old}), only_earlier


def _in_sorted(array: np.ndarray, keys: list[int]) -> list[bool]:
    if not len(array) or not keys:
        return [False] * len(keys)
    query = np.array(keys, dtype=np.uint64)
    positions = np.minimum(np.searchsorted(array, query), len(array) - 1)
    return (array[positions] == query).tolist()


class MinHasher:
    """MinHash signatures of word n-grams, vectorised with numpy.

    Words are lower-cased ``\\w+`` runs hashed with xxh32; an n-gram's 64-bit hash combines its words'
    hashes. Hash function ``i`` is the splitmix64 finaliser of ``shingle ^ seed_i``: a full-avalanche
    mix, so every function orders the shingles independently. (The linear family
    ``(a * h + b) mod (2**61 - 1)`` with 32-bit ``a``, ``h`` never wraps for small ``h``: it is then
    monotone in ``h``, every function picks the same few smallest shingles, and the signature estimates
    Jaccard far worse than its length promises.) A text shorter than ``ngram`` words is one shingle.
    """

    def __init__(self, config: DedupConfig):
        self.ngram, self.bands, self.rows = config.ngram, config.bands, config.rows
        rng = np.random.default_rng(config.seed)
        self.seeds = rng.integers(0, _MAX_64, size=config.bands * config.rows, dtype=np.uint64, endpoint=True)

    def shingles(self, text: str) -> np.ndarray:
        """64-bit hashes of the distinct word n-grams of ``text``."""
        hashes = np.array(
            [xxhash.xxh32_intdigest(w.encode()) for w in _WORD.findall(text.lower())], dtype=np.uint64
        )
        if len(hashes) == 0:
            return hashes
        n = min(self.ngram, len(hashes))
        keys = np.zeros(len(hashes) - n + 1, dtype=np.uint64)
        for offset in range(n):
            keys = keys * np.uint64(0x100000001B3) + hashes[offset : offset + len(keys)]
        return np.unique(keys)

    def signature(self, text: str) -> np.ndarray:
        """The ``bands * rows`` MinHash values of ``text`` (all ``2**64 - 1`` for a text without words)."""
        signature = np.full(len(self.seeds), _MAX_64, dtype=np.uint64)
        shingles = self.shingles(text)
        for start in range(0, len(shingles), _CHUNK):  # bounded memory for very long documents
            z = shingles[start : start + _CHUNK, None] ^ self.seeds[None, :]
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            signature = np.minimum(signature, (z ^ (z >> np.uint64(31))).min(axis=0))
        return signature

    def band_keys(self, signature: np.ndarray) -> list[int]:
        """One 64-bit key per band: xxh3 of the band's row values, seeded with the band's index."""
        bands = signature.reshape(self.bands, self.rows)
        return [xxhash.xxh3_64_intdigest(band.tobytes(), seed=i) for i, band in enumerate(bands)]
