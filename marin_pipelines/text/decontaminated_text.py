"""Decontamination: documents that share a long n-gram with an evaluation item are removed (or marked).

A benchmark whose items are in the training data scores memory, not skill, and every forecast through that
score inherits the error. The procedure here is our own, close to datatrove's n-gram decontamination: both
sides are normalised (``normalise``: case folded, Unicode compatibility forms folded as NFKC does, so that
full-width digits and letters and ligatures read as their plain forms, and accents dropped, so that a
precomposed letter and a letter with a combining accent read alike) and cut into words (letters and digits;
punctuation and spacing ignored), and a document overlaps an item when they share an n-gram of 13 words. An
item shorter than 13 words is matched whole (its own length is its n), down to ``min_words``; shorter items
match too much ordinary text and are left out and counted.

An item with a prompt and an answer (an lm-eval task's question and its correct answer) is indexed as the
two together, and, with ``match_prompt_alone`` (the default), also as its prompt on its own: the prompt's
n-grams, or the whole prompt when it is shorter than n, less the words every prompt of its set shares (a
template's ``Question:`` and ``Answer:``), when at least ``min_words`` words are left. A document holding the
question without its answer (a filter cut the answer line) is then found. With ``match_prompt_alone`` off,
only n-grams that reach into the answer count, as datatrove's default does (its label and overlap n-grams,
``find_query_ngrams=False``). Items without a separate prompt (whole texts, ``.txt`` lines) are matched on
all their n-grams either way.

The evaluation items are hashed once into an in-memory index (``NgramIndex``: per n-gram length, a sorted
array of 64-bit hashes and the item of each), which the documents are streamed against shard by shard on the
engine (``decontaminate`` is ``documents.run_stage``'s per-document function), so a corpus of any size needs
only the evaluation suite in memory. Each removed document keeps the sets and items it matched and one shared
n-gram; ``contamination_report`` turns those into the counts per set and, the other way round, the items of
each set found in the training data. A document whose text is missing (null) is removed as
``missing_field``, counted, as the corpus step counts such rows, under ``action: mark`` too: a row without
text is no document (the tokenizer would refuse it), and nothing readable is in it to keep.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import regex
import xxhash
from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.documents import MISSING_FIELD, Decision, Document

CONTAMINATED = "contaminated"  # the funnel's reason
WORD = re.compile(r"[^\W_]+")  # letters and digits of any script
MARKS = regex.compile(r"\p{Mn}+")  # nonspacing marks: 9x faster than str.translate's table of them
EXAMPLES = 10  # overlap examples kept in the report


@dataclass(frozen=True)
class EvalItem:
    """One evaluation item: its set (an lm-eval task, a held-out or chat set), its id there, its text (the
    prompt and the answer together, as the model sees it solved) and its prompt ("" when the item has no
    separate prompt: a whole text to score, a line of a file)."""

    suite: str
    item: str
    text: str
    prompt: str = ""


class DecontaminationConfig(BaseModel):
    """How long a shared n-gram must be, whether a prompt counts on its own, and what becomes of a document
    that has one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(13, ge=3, le=50, description="words in a shared n-gram")
    min_words: int = Field(8, ge=3, description="shorter items are matched whole down to this many words")
    min_overlap: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="share of an item's n-grams a document must hold (0: any one)",
    )
    match_prompt_alone: bool = Field(
        True,
        description="an item with a prompt and an answer also matches on its prompt alone (its n-grams, or "
        "the whole prompt down to min_words words, less its set's template words); false: only n-grams "
        "that reach into the answer count",
    )
    action: Literal["remove", "mark"] = Field(
        "remove",
        description="remove: the document goes to removed-*.parquet; mark: every document is kept with the "
        "sets and items it matched (a row whose text is null is no document: removed as missing_field either "
        "way)",
    )


def normalise(text: str) -> str:
    """``text`` as both sides are compared: case folded; compatibility forms folded and accents split off
    (NFKD: full-width digits and letters, ligatures and superscripts read as their plain forms), and the
    accents (nonspacing marks) dropped, so that "café", "cafe" + a combining acute and "CAFÉ" read alike."""
    text = text.casefold()
    if text.isascii():  # nothing to fold: most of a web crawl
        return text
    return MARKS.sub("", unicodedata.normalize("NFKD", text))


def words(text: str) -> list[str]:
    return WORD.findall(normalise(text))


def template_words(prompts: Sequence[Sequence[str]]) -> tuple[int, int]:
    """How many leading and trailing words every prompt of a set shares: its template's (lm-eval's
    "Question: ... Answer:"), not the item's own. A set of one prompt has none that can be told apart."""
    if len(prompts) < 2:
        return 0, 0
    shortest, first = min(map(len, prompts)), prompts[0]
    lead = 0
    while lead < shortest and all(p[lead] == first[lead] for p in prompts):
        lead += 1
    trail = 0
    while trail < shortest - lead and all(p[-1 - trail] == first[-1 - trail] for p in prompts):
        trail += 1
    return lead, trail


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
        parsed = [(item, words(item.text), words(item.prompt)) for item in items]
        prompts: dict[str, list[list[str]]] = defaultdict(list)
        for item, _, prompt in parsed:
            if prompt:
                prompts[item.suite].append(prompt)
        template = {suite: template_words(found) for suite, found in prompts.items()}
        for item, tokens, prompt in parsed:
            if len(tokens) < config.min_words:
                self.too_short[item.suite] += 1
                continue
            grams = self._item_ngrams(tokens, len(prompt), template.get(item.suite, (0, 0)))
            grams = {n: np.unique(found) for n, found in grams.items()}
            self.sizes.append(sum(len(found) for found in grams.values()))
            for n, found in grams.items():
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

    def _item_ngrams(
        self, tokens: list[str], prompt: int, template: tuple[int, int]
    ) -> dict[int, np.ndarray]:
        """An item's n-gram hashes by length: the whole item's (n, or its own length when shorter). Of an
        item whose first ``prompt`` words are its prompt: with ``match_prompt_alone``, also the prompt's own
        words (less the ``template`` words at its ends) matched whole when shorter than n; without, only the
        n-grams that reach into the answer."""
        config = self.config
        n = min(config.n, len(tokens))
        grams = {n: ngram_hashes(tokens, n)}
        if not 0 < prompt < len(tokens):  # no prompt apart from an answer: every n-gram counts
            return grams
        if not config.match_prompt_alone:
            grams[n] = grams[n][max(0, prompt - n + 1) :]  # the n-gram at i ends at word i + n - 1
            return grams
        lead, trail = template
        own = tokens[lead : prompt - trail]
        if config.min_words <= len(own) < config.n:  # a longer prompt's n-grams are among the whole item's
            grams[len(own)] = ngram_hashes(own, len(own))
        return grams

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
        if not isinstance(doc.get("text"), str):  # null: nothing to compare, counted as the corpus step does
            yield doc, MISSING_FIELD
            continue
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
