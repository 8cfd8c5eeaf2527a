"""Datashop labelling: a rubric prompt, a label scale, and annotators that label a sample of documents.

An expert describes the data they want in a rubric; an annotator gives a sample of the crawl a label on
the experiment's scale; the labels then train the fast quality classifier (``quality_scores``), which
scores the whole corpus. Two annotators:

- ``ChatAnnotator``: any OpenAI-compatible chat-completions endpoint (vLLM, Together, OpenAI...), with
  concurrent requests, a request rate limit, retries with exponential backoff on 429 / 5xx / timeouts,
  and a persistent cache keyed by model and prompt so that a re-run does not pay twice.
- ``SimilarityAnnotator``: the embedded default. No language model: each document gets the label whose
  example documents (given by the experiment) it is most similar to, by TF-IDF cosine.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import math
import random
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import requests
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from marin_pipelines.documents import Document

log = logging.getLogger(__name__)

DOCUMENT_SLOT = "{document}"
SIMILARITY = "similarity"
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_WORD = re.compile(r"[a-z0-9]+")
_SCORE = re.compile(r"score[\s:=*]*(-?\d+)\b", re.IGNORECASE)  # "Score: 3", "score = 3", "Score: **3**"
_BARE_INT = re.compile(r"\W*(-?\d+)\W*")


class AnnotationError(RuntimeError):
    """The endpoint refused the request in a way that retrying cannot fix (bad key, unknown model...)."""


class LabelScale(BaseModel):
    """Integer labels ``min..max``; documents labelled at least ``keep`` are the positives."""

    model_config = ConfigDict(extra="forbid")

    min: int = Field(0, description="lowest label")
    max: int = Field(5, description="highest label")
    keep: int = Field(3, description="labels >= keep are positives for the classifier")

    @model_validator(mode="after")
    def _ordered(self) -> LabelScale:
        if not self.min < self.max:
            raise ValueError(f"min ({self.min}) must be below max ({self.max})")
        if not self.min < self.keep <= self.max:
            raise ValueError(f"keep ({self.keep}) must be in ({self.min}, {self.max}] so both classes exist")
        return self

    def labels(self) -> range:
        return range(self.min, self.max + 1)


class DatashopConfig(BaseModel):
    """What to label and how: the rubric, the sample, the scale, and who labels."""

    model_config = ConfigDict(extra="forbid")

    rubric: str = Field(description=f"the prompt; {DOCUMENT_SLOT} is replaced by the document's text")
    sample_size: int = Field(500, ge=4, description="crawl documents sampled for labelling")
    scale: LabelScale = Field(
        LabelScale(), description="the integer labels min..max, and keep: the least label of a positive"
    )
    annotator: str = Field(
        SIMILARITY,
        min_length=1,
        description=f"{SIMILARITY!r} (embedded, no language model) or the model name to ask the "
        "annotator resource's chat-completions endpoint for",
    )
    examples: dict[int, list[str]] = Field(
        default_factory=dict,
        description=f"label -> example documents; the {SIMILARITY!r} annotator labels by similarity to them",
    )
    max_document_chars: int = Field(
        6000, ge=100, description="documents are cut to this length in the prompt"
    )
    seed: int = Field(0, ge=0, description="seeds the choice of the sample")

    @field_validator("rubric")
    @classmethod
    def _has_slot(cls, rubric: str) -> str:
        if DOCUMENT_SLOT not in rubric:
            raise ValueError(f"the rubric must contain {DOCUMENT_SLOT}, where the document's text goes")
        return rubric

    @model_validator(mode="after")
    def _examples_fit(self) -> DatashopConfig:
        outside = sorted(label for label in self.examples if label not in self.scale.labels())
        if outside:
            raise ValueError(
                f"examples for labels {outside} outside the scale {self.scale.min}..{self.scale.max}"
            )
        if self.annotator == SIMILARITY:
            given = [label for label, docs in self.examples.items() if any(d.strip() for d in docs)]
            if not any(label >= self.scale.keep for label in given) or not any(
                label < self.scale.keep for label in given
            ):
                raise ValueError(
                    f"the {SIMILARITY!r} annotator needs example documents for at least one label >= keep "
                    f"({self.scale.keep}) and one below it; got labels {sorted(given)}"
                )
        return self

    def prompt(self, text: str) -> str:
        """The rubric with the (cut) document in its slot; other braces in the rubric are left alone."""
        return self.rubric.replace(DOCUMENT_SLOT, text[: self.max_document_chars])


def parse_label(answer: str, scale: LabelScale) -> int | None:
    """The label in an answer: ``score: N`` anywhere, or a bare integer; None if absent or off the scale."""
    match = _SCORE.search(answer) or _BARE_INT.fullmatch(answer)
    if match is None:
        return None
    label = int(match.group(1))
    return label if scale.min <= label <= scale.max else None


@dataclass
class Annotations:
    """One label per input document (None: dropped) and what it took: requests, retries, cache hits..."""

    labels: list[int | None]
    stats: Counter[str] = field(default_factory=Counter)


class Annotator(Protocol):
    name: str

    def describe(self) -> str:
        """One honest line about what produces the labels, for the UI."""

    def annotate(self, texts: Sequence[str]) -> Annotations: ...


class SimilarityAnnotator:
    """Labels by TF-IDF cosine similarity to the experiment's example documents: no language model.

    Each label's examples become one centroid; a document gets the label of its most similar centroid
    (ties: the lower label). It reads no rubric: it is a stand-in that runs anywhere, not a judge.
    """

    name = "SimilarityAnnotator"

    def __init__(self, examples: dict[int, list[str]]):
        self.examples = {label: [d for d in docs if d.strip()] for label, docs in sorted(examples.items())}
        self.examples = {label: docs for label, docs in self.examples.items() if docs}
        if not self.examples:
            raise ValueError("SimilarityAnnotator needs at least one non-empty example document")

    def describe(self) -> str:
        counts = ", ".join(f"{label}: {len(docs)}" for label, docs in self.examples.items())
        return (
            "SimilarityAnnotator: no language model; each document gets the label whose example documents "
            f"it is most similar to (TF-IDF cosine). Examples per label: {counts}"
        )

    def annotate(self, texts: Sequence[str]) -> Annotations:
        bags = [Counter(_WORD.findall(t.lower())) for t in texts]
        example_bags = {
            label: [Counter(_WORD.findall(d.lower())) for d in docs] for label, docs in self.examples.items()
        }
        corpus = bags + [b for group in example_bags.values() for b in group]
        document_frequency = Counter(word for bag in corpus for word in bag)
        idf = {word: math.log((1 + len(corpus)) / (1 + n)) + 1 for word, n in document_frequency.items()}
        centroids = {}
        for label, group in example_bags.items():
            total: Counter[str] = Counter()
            for bag in group:
                for word, weight in _tfidf(bag, idf).items():
                    total[word] += weight
            centroids[label] = _normalised(total)
        labels: list[int | None] = []
        for bag in bags:
            vector = _tfidf(bag, idf)
            similarity = {
                label: sum(w * centroid.get(word, 0.0) for word, w in vector.items())
                for label, centroid in centroids.items()
            }
            labels.append(max(similarity, key=lambda label: (similarity[label], -label)))
        return Annotations(labels, Counter(documents=len(texts), labelled=len(texts)))


def _tfidf(bag: Counter[str], idf: dict[str, float]) -> dict[str, float]:
    return _normalised({word: (1 + math.log(n)) * idf[word] for word, n in bag.items()})


def _normalised(vector: dict[str, float]) -> dict[str, float]:
    norm = math.sqrt(sum(w * w for w in vector.values())) or 1.0
    return {word: w / norm for word, w in vector.items()}


class AnswerCache:
    """Answers already paid for, in sqlite, keyed by a hash of model and prompt (never the API key)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, model TEXT, answer TEXT)")
        self._db.commit()

    @staticmethod
    def key(model: str, prompt: str) -> str:
        return hashlib.sha256(json.dumps([model, prompt]).encode()).hexdigest()

    def get(self, model: str, prompt: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT answer FROM answers WHERE key = ?", (self.key(model, prompt),)
            ).fetchone()
        return row[0] if row else None

    def put(self, model: str, prompt: str, answer: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO answers VALUES (?, ?, ?)", (self.key(model, prompt), model, answer)
            )
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RateLimiter:
    """At most ``per_second`` request starts per second, shared by all threads (evenly spaced)."""

    def __init__(self, per_second: float):
        self.interval = 1.0 / per_second
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            slot = max(self._next, now)
            self._next = slot + self.interval
        if slot > now:
            time.sleep(slot - now)


@dataclass(frozen=True)
class ChatSettings:
    """How to reach and pace an OpenAI-compatible endpoint; the API key is passed apart, never stored here."""

    base_url: str
    model: str
    max_concurrency: int = 8
    requests_per_second: float = 5.0
    timeout_s: float = 60.0
    max_retries: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    max_tokens: int = 16


class ChatAnnotator:
    """Labels with a language model behind an OpenAI-compatible ``/chat/completions`` endpoint."""

    name = "ChatAnnotator"

    def __init__(
        self,
        settings: ChatSettings,
        config: DatashopConfig,
        cache: AnswerCache,
        api_key: str | None = None,
        seed: int = 0,
    ):
        self.settings, self.config, self.cache = settings, config, cache
        self._api_key = api_key
        self._rng = random.Random(seed)  # backoff jitter
        self._session = requests.Session()
        self._stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._limiter = RateLimiter(settings.requests_per_second)

    def __repr__(self) -> str:  # the key stays out of reprs, tracebacks and logs
        return f"ChatAnnotator(model={self.settings.model!r}, base_url={self.settings.base_url!r})"

    def describe(self) -> str:
        return f"ChatAnnotator: model {self.settings.model} at {self.settings.base_url} (chat completions)"

    def annotate(self, texts: Sequence[str]) -> Annotations:
        self._stats = Counter(documents=len(texts))
        with ThreadPoolExecutor(self.settings.max_concurrency, thread_name_prefix="annotate") as pool:
            labels = list(pool.map(self._label, texts))
        self._stats["labelled"] = sum(label is not None for label in labels)
        return Annotations(labels, self._stats)

    def _count(self, what: str) -> None:
        with self._stats_lock:
            self._stats[what] += 1

    def _label(self, text: str) -> int | None:
        prompt = self.config.prompt(text)
        answer = self.cache.get(self.settings.model, prompt)
        if answer is not None:
            self._count("cache_hits")
        else:
            answer = self._ask(prompt)
            if answer is None:
                return None
            self.cache.put(self.settings.model, prompt, answer)
        label = parse_label(answer, self.config.scale)
        if label is None:
            self._count("unparseable")
        return label

    def _ask(self, prompt: str) -> str | None:
        """The answer's content; None (counted) when retries are spent or the body is not a completion."""
        url = self.settings.base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        payload = {
            "model": self.settings.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": self.settings.max_tokens,
        }
        for attempt in range(self.settings.max_retries + 1):
            self._limiter.wait()
            self._count("requests")
            retry_after = None
            try:
                response = self._session.post(
                    url, json=payload, headers=headers, timeout=self.settings.timeout_s
                )
            except (requests.Timeout, requests.ConnectionError) as e:
                reason = type(e).__name__
            else:
                if response.ok:
                    return self._content(response)
                if response.status_code not in RETRYABLE_STATUS:
                    raise AnnotationError(
                        f"{url} answered HTTP {response.status_code} for model {self.settings.model!r}: "
                        f"{self._redact(response.text[:300])}"
                    )
                reason = f"HTTP {response.status_code}"
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            if attempt == self.settings.max_retries:
                log.warning(
                    "annotation request failed %d times (last: %s); document dropped", attempt + 1, reason
                )
                self._count("failed")
                return None
            delay = retry_after if retry_after is not None else self.settings.backoff_s * 2**attempt
            delay = min(delay, self.settings.max_backoff_s) + self._rng.uniform(0, self.settings.backoff_s)
            log.info("annotation request: %s; retry %d in %.1f s", reason, attempt + 1, delay)
            self._count("retries")
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _content(self, response: requests.Response) -> str | None:
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str):
            self._count("unparseable")  # a 200 that is not a chat completion: nothing to cache
            return None
        return content

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def label_distribution(labels: Sequence[int | None], scale: LabelScale) -> dict[str, int]:
    """Documents per label on the whole scale (zeros included), in order."""
    counts = Counter(label for label in labels if label is not None)
    return {str(label): counts[label] for label in scale.labels()}


def reservoir_sample(docs: Iterable[Document], k: int, seed: int) -> list[Document]:
    """``k`` documents drawn uniformly in one pass (all of them if fewer), in their original order."""
    rng = random.Random(seed)
    reservoir: list[tuple[int, Document]] = []
    for i, doc in enumerate(docs):
        if i < k:
            reservoir.append((i, doc))
        elif (j := rng.randrange(i + 1)) < k:
            reservoir[j] = (i, doc)
    return [doc for _, doc in sorted(reservoir, key=lambda pair: pair[0])]


def label_sample(
    docs: Iterable[Document], config: DatashopConfig, annotator: Annotator
) -> tuple[list[Document], Annotations]:
    """The seeded sample with a ``label`` each (None where the annotator gave none), and the stats."""
    sample = reservoir_sample(docs, config.sample_size, config.seed)
    result = annotator.annotate([doc["text"] for doc in sample])
    rows = [
        {"id": doc["id"], "url": doc.get("url"), "text": doc["text"], "label": label}
        for doc, label in zip(sample, result.labels, strict=True)
    ]
    return rows, result


def classifier_examples(rows: Iterable[Document], scale: LabelScale) -> tuple[list[str], list[str]]:
    """Texts labelled ``>= scale.keep`` (positives) and below it (negatives); unlabelled ones are left out."""
    labelled = [row for row in rows if row["label"] is not None]
    positives = [row["text"] for row in labelled if row["label"] >= scale.keep]
    negatives = [row["text"] for row in labelled if row["label"] < scale.keep]
    if len(positives) < 2 or len(negatives) < 2:
        raise ValueError(
            f"datashop: the classifier needs at least 2 documents labelled >= scale.keep ({scale.keep}) "
            f"and 2 below it; the sample has {len(positives)} and {len(negatives)}: change the examples, the "
            "rubric, scale.keep or sample_size"
        )
    return positives, negatives
