"""DCLM-style quality classifier: a fastText model that tells reference-quality text from the crawl.

Positives come from a reference set of good documents (files, or a builtin set shipped with Python so
that the embedded demo needs no download); negatives are crawl documents. The classifier's P(positive)
is each document's quality score, which ``curated_text`` thresholds or ranks.
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import tempfile
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import fasttext
import pyarrow.parquet as pq
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import BaseModel, ConfigDict, Field, field_validator

from marin_pipelines.documents import Document

BUILTIN_PYTHON_DOCSTRINGS = "builtin:python-docstrings"
REFERENCE_SUFFIXES = (".txt", ".jsonl", ".parquet")
POSITIVE_LABEL = "__label__hq"
NEGATIVE_LABEL = "__label__lq"
SCORE_BATCH = 1024

# Stdlib modules whose docstrings are careful, explanatory English prose. A fixed list, not a walk over
# installed modules, so the reference set is the same on every machine with the same Python.
DOCSTRING_MODULES = (
    "argparse",
    "asyncio",
    "calendar",
    "collections",
    "configparser",
    "contextlib",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email.message",
    "enum",
    "fractions",
    "functools",
    "gettext",
    "heapq",
    "http.client",
    "inspect",
    "ipaddress",
    "json",
    "logging",
    "mailbox",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "shutil",
    "smtplib",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "unittest",
    "urllib.parse",
    "zipfile",
)
MIN_DOCSTRING_CHARS = 80  # shorter ones ("Return self.") are not documents


def _source_kind(source: str) -> str:
    """The builtin name or file suffix of a reference source; raises ValueError for anything else."""
    if source.startswith("builtin:"):
        if source != BUILTIN_PYTHON_DOCSTRINGS:
            raise ValueError(f"unknown builtin reference {source!r}; known: {BUILTIN_PYTHON_DOCSTRINGS}")
        return source
    suffix = Path(source).suffix.lower()
    if suffix not in REFERENCE_SUFFIXES:
        raise ValueError(
            f"reference {source!r} must be {BUILTIN_PYTHON_DOCSTRINGS} or a file ending in "
            f"{', '.join(REFERENCE_SUFFIXES)}"
        )
    return suffix


class QualityConfig(BaseModel):
    """How the quality classifier is trained: reference sources, class balance, fastText settings."""

    model_config = ConfigDict(extra="forbid")

    reference: list[str] = Field(
        default=[BUILTIN_PYTHON_DOCSTRINGS],
        min_length=1,
        description="sources of good documents: .txt (one per line), .jsonl (`text`), .parquet (`text`) "
        f"or {BUILTIN_PYTHON_DOCSTRINGS}",
    )
    negatives_per_positive: float = Field(
        1.0, gt=0, description="crawl documents are sampled down to this many per reference document"
    )
    word_ngrams: int = Field(2, ge=1, le=5, description="fastText wordNgrams")
    dim: int = Field(64, ge=2, le=1024, description="fastText embedding dimension")
    epoch: int = Field(10, ge=1, le=1000, description="fastText training epochs")
    lr: float = Field(0.1, gt=0, le=10, description="fastText learning rate")
    min_count: int = Field(1, ge=1, description="words rarer than this are ignored")
    bucket: int = Field(
        200_000, ge=1000, description="hash buckets for n-grams; the model file holds bucket x dim floats"
    )
    seed: int = Field(0, ge=0, lt=1 << 31, description="fastText's seed is a C int")
    heldout_fraction: float = Field(
        0.1, gt=0, le=0.5, description="fraction of each class kept out of training to measure the model"
    )

    @field_validator("reference")
    @classmethod
    def _known_sources(cls, sources: list[str]) -> list[str]:
        for source in sources:
            _source_kind(source)
        return sources


def python_docstrings() -> list[str]:
    """Docstrings of public classes, functions and methods of ``DOCSTRING_MODULES``, deduplicated."""
    docs: list[str] = []
    for module_name in DOCSTRING_MODULES:
        module = importlib.import_module(module_name)
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
                continue
            if inspect.isclass(obj):
                members = [obj] + [m for _, m in sorted(vars(obj).items()) if inspect.isfunction(m)]
            elif inspect.isfunction(obj):
                members = [obj]
            else:
                continue
            docs.extend(
                doc for doc in map(inspect.getdoc, members) if doc and len(doc) >= MIN_DOCSTRING_CHARS
            )
    return list(dict.fromkeys(docs))


def _read_source(source: str) -> list[str]:
    kind = _source_kind(source)
    if kind == BUILTIN_PYTHON_DOCSTRINGS:
        return python_docstrings()
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"reference file not found: {path}")
    if kind == ".txt":
        return path.read_text(encoding="utf-8").splitlines()
    if kind == ".jsonl":
        with path.open(encoding="utf-8") as f:
            return [json.loads(line)["text"] for line in f if line.strip()]
    return pq.read_table(path, columns=["text"]).column("text").to_pylist()


def load_reference_texts(sources: list[str]) -> list[str]:
    """Texts of all reference sources, in order, without blank ones."""
    return [text for source in sources for text in _read_source(source) if text and text.strip()]


def fasttext_line(text: str) -> str:
    """One lowercase line as fastText reads it; ``__label__`` inside text would otherwise be a label."""
    return " ".join(text.lower().replace("__label__", "label").split())


def _split(
    name: str, texts: list[str], heldout_fraction: float, rng: random.Random
) -> tuple[list[str], list[str]]:
    """Shuffled (train, held-out) with at least one text on each side."""
    if len(texts) < 2:
        raise ValueError(f"{name}: need at least 2 non-empty texts to train and measure, got {len(texts)}")
    texts = texts[:]
    rng.shuffle(texts)
    n_heldout = min(len(texts) - 1, max(1, round(len(texts) * heldout_fraction)))
    return texts[n_heldout:], texts[:n_heldout]


def _positive_probabilities(model: Any, lines: list[str]) -> list[float]:
    labels, probs = model.predict(lines, k=-1)
    return [float(p[list(ls).index(POSITIVE_LABEL)]) for ls, p in zip(labels, probs, strict=True)]


def _metrics(model: Any, positives: list[str], negatives: list[str]) -> dict[str, float]:
    predicted = [p >= 0.5 for p in _positive_probabilities(model, positives + negatives)]
    truth = [True] * len(positives) + [False] * len(negatives)
    tp = sum(p and t for p, t in zip(predicted, truth, strict=True))
    fp = sum(p and not t for p, t in zip(predicted, truth, strict=True))
    fn = sum(t and not p for p, t in zip(predicted, truth, strict=True))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    accuracy = sum(p == t for p, t in zip(predicted, truth, strict=True)) / len(truth)
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": accuracy}


def train_quality_classifier(
    positives: list[str], negatives: list[str], config: QualityConfig, out_path: Path
) -> dict[str, Any]:
    """Train the classifier into ``out_path`` (a fastText .bin); returns counts and held-out metrics.

    Negatives are sampled down to ``negatives_per_positive`` per positive. Each class is split into
    train and held-out parts; the saved model is the one trained without the held-out part, so the
    metrics describe it. One thread and a fixed seed make the model the same on every run.
    """
    rng = random.Random(config.seed)
    pos = [line for line in map(fasttext_line, positives) if line]
    neg_available = [line for line in map(fasttext_line, negatives) if line]
    n_neg = min(len(neg_available), max(1, round(len(pos) * config.negatives_per_positive)))
    neg = rng.sample(neg_available, n_neg)
    pos_train, pos_heldout = _split("positives", pos, config.heldout_fraction, rng)
    neg_train, neg_heldout = _split("negatives", neg, config.heldout_fraction, rng)
    lines = [f"{POSITIVE_LABEL} {t}" for t in pos_train] + [f"{NEGATIVE_LABEL} {t}" for t in neg_train]
    rng.shuffle(lines)
    with tempfile.TemporaryDirectory() as tmp:
        train_file = Path(tmp) / "train.txt"
        train_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        model = fasttext.train_supervised(
            input=str(train_file),
            wordNgrams=config.word_ngrams,
            dim=config.dim,
            epoch=config.epoch,
            lr=config.lr,
            minCount=config.min_count,
            bucket=config.bucket,
            seed=config.seed,
            thread=1,
            verbose=0,
        )
    model.save_model(str(out_path))
    return {
        "positives": len(pos),
        "negatives": len(neg),
        "negatives_available": len(neg_available),
        "train_positives": len(pos_train),
        "train_negatives": len(neg_train),
        "heldout_positives": len(pos_heldout),
        "heldout_negatives": len(neg_heldout),
        **_metrics(model, pos_heldout, neg_heldout),
    }


def score_documents(model_path: Path, docs: Iterable[Document]) -> Iterator[tuple[str, float]]:
    """``(id, P(positive))`` for each document, in order, predicted in batches."""
    if not Path(model_path).is_file():
        raise FileNotFoundError(f"quality model not found: {model_path}")
    model = fasttext.load_model(str(model_path))
    if POSITIVE_LABEL not in model.get_labels():
        raise ValueError(f"{model_path} has no {POSITIVE_LABEL} label (labels: {model.get_labels()})")
    docs = iter(docs)
    while batch := list(islice(docs, SCORE_BATCH)):
        probabilities = _positive_probabilities(model, [fasttext_line(doc["text"]) for doc in batch])
        yield from zip((doc["id"] for doc in batch), probabilities, strict=True)


def plot_score_histogram(scores: list[float], path: Path, title: str) -> None:
    """Histogram of P(positive) over [0, 1]: where the curation threshold would cut."""
    figure = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    ax.hist(scores, bins=40, range=(0.0, 1.0), color="tab:blue", edgecolor="white", linewidth=0.5)
    ax.set_xlabel("quality score: P(positive)")
    ax.set_ylabel("documents")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
