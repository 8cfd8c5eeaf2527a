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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.documents import Decision, Document

_MERSENNE_61 = np.uint64((1 << 61) - 1)
_MASK_32 = np.uint64(0xFFFFFFFF)
_WORD = re.compile(r"\w+")
_BLANK_RUNS = re.compile(r"\n{3,}")
_CHUNK = 8192


class DedupConfig(BaseModel):
    """Deduplication settings.

    14 bands x 8 rows (112 hashes) of word 5-grams is FineWeb's choice: the probability that two
    documents become candidates is ``1 - (1 - J**8) ** 14`` for 5-gram Jaccard similarity J, which is
    about 0.5 at J = 0.69, 0.92 at J = 0.8 and 0.99 at J = 0.85, while pairs below J = 0.5 almost
    never collide (< 0.06). ``seed`` fixes the hash functions, so signatures are reproducible.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    exact_paragraphs: bool = True
    fuzzy: bool = True
    ngram: int = Field(5, ge=1)
    bands: int = Field(14, ge=1)
    rows: int = Field(8, ge=1)
    seed: int = Field(1, ge=0)


def deduplicate(docs: Iterable[Document], config: DedupConfig | None = None) -> Iterator[Decision]:
    """One decision per document; kept documents lose the paragraphs seen in earlier documents."""
    config = config or DedupConfig()
    hasher = MinHasher(config)
    seen_paragraphs: set[int] = set()
    seen_bands: set[bytes] = set()
    for doc in docs:
        text = doc["text"]
        if config.exact_paragraphs:
            text = _drop_seen_paragraphs(text, seen_paragraphs)
            if not text:
                yield doc, "exact_duplicate"
                continue
        if config.fuzzy:
            bands = hasher.band_keys(hasher.signature(doc["text"]))
            if not seen_bands.isdisjoint(bands):
                yield doc, "near_duplicate"
                continue
            seen_bands.update(bands)
        yield {**doc, "text": text}, None


def _drop_seen_paragraphs(text: str, seen: set[int]) -> str:
    lines = text.split("\n")
    keys = [
        xxhash.xxh3_64_intdigest(" ".join(line.lower().split()).encode()) if line.strip() else None
        for line in lines
    ]
    kept = [line for line, key in zip(lines, keys, strict=True) if key is None or key not in seen]
    seen.update(key for key in keys if key is not None)
    return _BLANK_RUNS.sub("\n\n", "\n".join(kept)).strip()


class MinHasher:
    """MinHash signatures of word n-grams, vectorised with numpy.

    Words are lower-cased ``\\w+`` runs hashed with xxh32; an n-gram's hash combines its words' hashes;
    the ``bands * rows`` hash functions are ``(a * h + b) mod (2**61 - 1)`` with 32-bit ``a``, ``b`` from
    ``seed``, so every product fits in 64 bits. A text shorter than ``ngram`` words is one shingle.
    """

    def __init__(self, config: DedupConfig):
        self.ngram, self.bands, self.rows = config.ngram, config.bands, config.rows
        rng = np.random.default_rng(config.seed)
        n_hashes = config.bands * config.rows
        self.a = rng.integers(1, 1 << 32, size=n_hashes, dtype=np.uint64)
        self.b = rng.integers(0, 1 << 32, size=n_hashes, dtype=np.uint64)

    def shingles(self, text: str) -> np.ndarray:
        """32-bit hashes of the distinct word n-grams of ``text``."""
        hashes = np.array(
            [xxhash.xxh32_intdigest(w.encode()) for w in _WORD.findall(text.lower())], dtype=np.uint64
        )
        if len(hashes) == 0:
            return hashes
        n = min(self.ngram, len(hashes))
        keys = np.zeros(len(hashes) - n + 1, dtype=np.uint64)
        for offset in range(n):
            keys = keys * np.uint64(0x100000001B3) + hashes[offset : offset + len(keys)]
        return np.unique((keys ^ (keys >> np.uint64(32))) & _MASK_32)

    def signature(self, text: str) -> np.ndarray:
        """The ``bands * rows`` MinHash values of ``text`` (all ``2**61 - 1`` for a text without words)."""
        signature = np.full(len(self.a), _MERSENNE_61, dtype=np.uint64)
        shingles = self.shingles(text)
        for start in range(0, len(shingles), _CHUNK):  # bounded memory for very long documents
            hashed = (np.outer(shingles[start : start + _CHUNK], self.a) + self.b) % _MERSENNE_61
            signature = np.minimum(signature, hashed.min(axis=0))
        return signature

    def band_keys(self, signature: np.ndarray) -> list[bytes]:
        """One key per band: the band's index and its row values, as bytes."""
        bands = signature.reshape(self.bands, self.rows)
        return [index.to_bytes(2, "little") + band.tobytes() for index, band in enumerate(bands)]
