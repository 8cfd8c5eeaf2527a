"""Decontamination: documents that share a long n-gram with an evaluation item are removed (or marked).

A benchmark whose items are in the training data scores memory, not skill, and every forecast through that
score inherits the error. As GPT-3 and Marin do it: text is lowercased and cut into words (letters and
digits; punctuation and spacing ignored), and a document overlaps an item when they share an n-gram of 13
words. An item shorter than 13 words is matched whole (its own length is its n), down to ``min_words``;
shorter items match too much ordinary text and are left out and counted.

The evaluation items are hashed once into an in-memory index (``NgramIndex``: per n-gram length, a sorted
array of 64-bit hashes and the item of each), which the documents are streamed against shard by shard on the
engine (``decontaminate`` is ``documents.run_stage``'s per-document function), so a corpus of any size needs
only the evaluation suite in memory. Each removed document keeps the sets and items it matched and one shared
n-gram; ``contamination_report`` turns those into the counts per set and, the other way round, the items of
each set found in the training data.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.documents import Decision, Document

CONTAMINATED = "contaminated"  # the funnel's reason
WORD = re.compile(r"[^\W_]+")  # letters and digits of any script
EXAMPLES = 10  # overlap examples kept in the report


@dataclass(frozen=True)
class EvalItem:
    """One evaluation item: its set (an lm-eval task, a held-out or chat set), its id there, its text."""

    suite: str
    item: str
    text: str


class DecontaminationConfig(BaseModel):
    """How long a shared n-gram must be, and what becomes of a document that has one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(13, ge=3, le=50, description="words in a shared n-gram (GPT-3 and Marin: 13)")
    min_words: int = Field(8, ge=3, description="shorter items are matched whole down to this many words")
    min_overlap: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of an item's n-grams a document must hold (0: any one, GPT-3's)",
    )
    action: Literal["remove", "mark"] = Field(
        "remove",
        description="remove: the document goes to removed-*.parquet; mark: kept with contaminated_by",
    )


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def _word_hashes(tokens: Sequence[str]) -> np.ndarray:
    hashed = (xxhash.xxh64_intdigest(token.encode()) for token in tokens)
    return np.fromiter(hashed, dtype=np.uint64, count=len(tokens))


_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: the polynomial hash below mixes every word's position


def ngram_hashes(tokens: Sequence[str], n: int) -> np.ndarray:
    """The 64-bit hash of every run of ``n`` consecutive words (none when there are fewer words)."""
    count = len(tokens) - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    hashed = _word_hashes(tokens)
    out = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):  # arithmetic modulo 2**64, on purpose
        for offset in range(n):
            out = out * _MULTIPLIER + hashed[offset : offset + count]
    return out


class NgramIndex:
    """The hashed n-grams of evaluation items, and which item each came from."""

    def __init__(self, items: Iterable[EvalItem], config: DecontaminationConfig):
        self.config = config
        self.items: list[EvalItem] = []
        self.sizes: list[int] = []  # each item's distinct n-grams
        self.too_short: Counter[str] = Counter()  # per set: items under min_words, not matched
        hashes: dict[int, list[np.ndarray]] = defaultdict(list)
        owners: dict[int, list[np.ndarray]] = defaultdict(list)
        for item in items:
            tokens = words(item.text)
            if len(tokens) < config.min_words:
                self.too_short[item.suite] += 1
                continue
            n = min(config.n, len(tokens))
            found = np.unique(ngram_hashes(tokens, n))
            self.sizes.append(len(found))
            hashes[n].append(found)
            owners[n].append(np.full(len(found), len(self.items), dtype=np.int64))
            self.items.append(item)
        self.tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for n in hashes:
            values, who = np.concatenate(hashes[n]), np.concatenate(owners[n])
            order = np.argsort(values, kind="stable")
            self.tables[n] = (values[order], who[order])
        self.suites = sorted({item.suite for item in self.items} | set(self.too_short))
        if not self.items:  # a step that could never remove anything would look like a clean corpus
            short = f" ({sum(self.too_short.values())} shorter than min_words {config.min_words})"
            raise ValueError(
                "no evaluation item to decontaminate against" + (short if self.too_short else "")
            )

    def matches(self, text: str) -> dict[int, str]:
        """The items ``text`` shares an n-gram with (at least ``min_overlap`` of the item's), each with one
        shared n-gram (as words)."""
        tokens = words(text)
        found: dict[int, str] = {}
        shared: dict[int, set[int]] = defaultdict(set)
        for n, (values, who) in self.tables.items():
            hashes = ngram_hashes(tokens, n)
            if not len(hashes):
                continue
            at = np.searchsorted(values, hashes)
            hit = np.flatnonzero((at < len(values)) & (values[np.minimum(at, len(values) - 1)] == hashes))
            for position in hit:
                start = at[position]
                stop = np.searchsorted(values, hashes[position], side="right")
                for owner in who[start:stop]:
                    found.setdefault(int(owner), " ".join(tokens[position : position + n]))
                    shared[int(owner)].add(int(hashes[position]))
        share = self.config.min_overlap
        return {item: ngram for item, ngram in found.items() if len(shared[item]) >= share * self.sizes[item]}


def decontaminate(docs: Iterable[Document], index: NgramIndex) -> Iterator[Decision]:
    """One decision per document: kept, or removed as ``contaminated`` with the sets and items it matched
    and one shared n-gram (with ``action: mark`` every document is kept, with those fields, empty or not)."""
    for doc in docs:
        found = index.matches(doc["text"])
        matched = {
            "matched_sets": sorted({index.items[i].suite for i in found}),
            "matched_items": [f"{index.items[i].suite}/{index.items[i].item}" for i in sorted(found)],
            "shared_ngram": found[min(found)] if found else "",
        }
        if index.config.action == "mark":
            yield {**doc, **matched}, None
        elif found:
            yield {**doc, **matched}, CONTAMINATED
        else:
            yield doc, None


def contamination_report(docs: Iterable[Document], index: NgramIndex) -> dict[str, Any]:
    """From the documents ``decontaminate`` annotated (the removed ones; with ``action: mark``, the kept):
    per evaluation set, the documents that matched it and (the reverse report) its items found in the
    training data; a few examples; the items too short to match."""
    documents: Counter[str] = Counter()
    overlapping: dict[str, set[str]] = defaultdict(set)
    examples: list[dict[str, str]] = []
    contaminated = 0
    for doc in docs:
        if not doc.get("matched_items"):
            continue
        contaminated += 1
        documents.update(doc["matched_sets"])
        for name in doc["matched_items"]:
            suite, item = name.split("/", 1)
            overlapping[suite].add(item)
        if len(examples) < EXAMPLES:
            examples.append(
                {
                    "id": str(doc["id"]),
                    "items": ", ".join(doc["matched_items"][:3]),
                    "shared": doc["shared_ngram"],
                }
            )
    sizes = Counter(item.suite for item in index.items)
    return {
        "documents": contaminated,
        "per_set": {
            suite: {
                "documents": documents[suite],
                "items": sizes[suite] + index.too_short[suite],
                "items_in_training_data": len(overlapping[suite]),
                "items_too_short": index.too_short[suite],
            }
            for suite in index.suites
        },
        "items_in_training_data": {suite: sorted(items) for suite, items in sorted(overlapping.items())},
        "examples": examples,
    }


def report_table(per_set: dict[str, dict[str, int]]) -> str:
    """``contamination_report``'s counts per evaluation set as a markdown table."""
    lines = [
        "| evaluation set | documents matched | items in training data | items too short |",
        "|---|---:|---:|---:|",
    ]
    for suite, r in per_set.items():
        found = f"{r['items_in_training_data']} of {r['items']}"
        lines.append(f"| {suite} | {r['documents']} | {found} | {r['items_too_short']} |")
    return "\n".join(lines)
