"""fastText quality classifier: reference sources, held-out quality on distinct classes, reproducibility."""

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from marin_pipelines.quality.quality_scores import (
    BUILTIN_PYTHON_DOCSTRINGS,
    QualityConfig,
    load_reference_texts,
    plot_score_histogram,
    score_documents,
    train_quality_classifier,
)

SUBJECTS = [
    "the river delta",
    "photosynthesis",
    "the printing press",
    "plate tectonics",
    "the immune system",
    "medieval trade routes",
    "the steam engine",
    "coral reefs",
    "the Roman calendar",
    "prime numbers",
]
CLAIMS = [
    "was first described in detail by researchers in the nineteenth century",
    "depends on a balance between several competing processes",
    "is explained by a small number of physical principles",
    "changed the way that knowledge spread between cities",
    "can be measured with instruments that are surprisingly simple",
    "has been studied through careful observation and controlled experiments",
]
FOLLOW_UPS = [
    "Historians still debate how quickly these changes happened.",
    "This section summarises the evidence and its limitations.",
    "Later work refined the original model without replacing it.",
    "The consequences are discussed in the following chapter.",
    "Several open questions remain, as the references below explain.",
]
SPAM = [
    "BUY NOW",
    "best price guaranteed",
    "click here",
    "limited offer",
    "free shipping today",
    "100% satisfaction",
    "sign up for our newsletter",
    "accept all cookies",
    "hot deals",
    "order today",
    "cheap replica watches",
    "win a free iPhone",
    "only 3 left in stock",
    "subscribe",
    "share on facebook",
    "login",
    "cart (0)",
    "privacy policy",
    "terms of use",
    "casino bonus",
]


def good_text(rng: random.Random) -> str:
    sentences = [
        f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(CLAIMS)}." for _ in range(rng.randint(2, 4))
    ]
    return " ".join(sentences + [rng.choice(FOLLOW_UPS)])


def spam_text(rng: random.Random) -> str:
    words = rng.sample(SPAM, rng.randint(5, 12)) + [rng.choice(SUBJECTS)]
    rng.shuffle(words)
    return " | ".join(words) + "!!!"


def corpus(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    return [good_text(rng) for _ in range(n)], [spam_text(rng) for _ in range(n)]


CONFIG = QualityConfig(bucket=10_000, dim=16)


def test_trains_an_accurate_classifier(tmp_path: Path) -> None:
    positives, negatives = corpus(300, seed=1)
    report = train_quality_classifier(positives, negatives + negatives[:150], CONFIG, tmp_path / "model.bin")
    assert (tmp_path / "model.bin").stat().st_size > 0
    assert report["positives"] == 300 and report["negatives_available"] == 450
    assert report["negatives"] == 300  # sampled down to negatives_per_positive
    assert report["heldout_positives"] == report["heldout_negatives"] == 30
    assert report["train_positives"] + report["heldout_positives"] == 300
    assert report["f1"] >= 0.95 and report["accuracy"] >= 0.95
    assert 0.95 <= report["precision"] <= 1 and 0.95 <= report["recall"] <= 1

    fresh_good, fresh_spam = corpus(50, seed=2)
    docs = [{"id": f"g{i}", "text": t} for i, t in enumerate(fresh_good)]
    docs += [{"id": f"s{i}", "text": t} for i, t in enumerate(fresh_spam)]
    scores = list(score_documents(tmp_path / "model.bin", docs))
    assert [doc_id for doc_id, _ in scores] == [d["id"] for d in docs]
    assert all(0 <= p <= 1 for _, p in scores)
    assert min(p for doc_id, p in scores if doc_id[0] == "g") > max(
        p for doc_id, p in scores if doc_id[0] == "s"
    )


def test_same_seed_same_scores(tmp_path: Path) -> None:
    positives, negatives = corpus(200, seed=3)
    docs = [
        {"id": str(i), "text": t}
        for i, t in enumerate(corpus(20, seed=4)[0] + ["", "line\nbreaks\tand __label__x"])
    ]
    scores = {}
    for name, seed in [("a", 5), ("b", 5), ("c", 6)]:
        config = CONFIG.model_copy(update={"seed": seed})
        train_quality_classifier(positives, negatives, config, tmp_path / f"{name}.bin")
        scores[name] = [p for _, p in score_documents(tmp_path / f"{name}.bin", docs)]
    assert scores["a"] == scores["b"]
    assert scores["a"] != scores["c"]


def test_too_few_examples(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="positives: need at least 2 non-empty texts to train and measure, got 1"
    ):
        train_quality_classifier(
            ["one good text", "  \n "], ["spam", "more spam"], CONFIG, tmp_path / "m.bin"
        )
    with pytest.raises(ValueError, match="negatives: need at least 2"):
        train_quality_classifier(["good text", "more good text"], [], CONFIG, tmp_path / "m.bin")


def test_score_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="quality model not found"):
        list(score_documents(tmp_path / "missing.bin", []))


def test_reference_sources(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("first document\n\nsecond document\n")
    (tmp_path / "good.jsonl").write_text(json.dumps({"text": "from jsonl", "id": 1}) + "\n\n")
    pq.write_table(pa.table({"text": ["from parquet", ""], "id": ["a", "b"]}), tmp_path / "good.parquet")
    sources = [str(tmp_path / name) for name in ("good.txt", "good.jsonl", "good.parquet")]
    assert load_reference_texts(sources) == [
        "first document",
        "second document",
        "from jsonl",
        "from parquet",
    ]
    with pytest.raises(FileNotFoundError, match="reference file not found"):
        load_reference_texts([str(tmp_path / "absent.txt")])


def test_builtin_python_docstrings() -> None:
    texts = load_reference_texts([BUILTIN_PYTHON_DOCSTRINGS])
    assert len(texts) > 300 and len(set(texts)) == len(texts)
    assert all(len(t) >= 80 for t in texts)
    assert any(t.startswith("Return the median (middle value) of numeric data.") for t in texts)
    assert texts == load_reference_texts([BUILTIN_PYTHON_DOCSTRINGS])


def test_config_validation_names_the_field() -> None:
    config = QualityConfig()
    assert config.reference == [BUILTIN_PYTHON_DOCSTRINGS] and config.word_ngrams == 2
    with pytest.raises(ValidationError, match="reference\n.*'data.csv' must be builtin:python-docstrings or"):
        QualityConfig(reference=["data.csv"])
    with pytest.raises(ValidationError, match="reference\n.*unknown builtin reference 'builtin:wiki'"):
        QualityConfig(reference=["builtin:wiki"])
    with pytest.raises(ValidationError, match="negatives_per_positive"):
        QualityConfig(negatives_per_positive=0)
    with pytest.raises(ValidationError, match="heldout_fraction"):
        QualityConfig(heldout_fraction=0.9)


def test_score_histogram_is_a_png(tmp_path: Path) -> None:
    plot_score_histogram([0.1, 0.2, 0.9, 0.95], tmp_path / "h.png", "4 documents")
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
