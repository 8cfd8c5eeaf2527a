"""Curation by threshold or top fraction: reasons, deterministic ties, scores kept, funnel conserved."""

import pytest
from pydantic import ValidationError

from marin_pipelines.documents import Funnel
from marin_pipelines.quality.curated_text import CurationConfig, curate, examples_table, extreme_ids

SCORES = {"a": 0.9, "b": 0.2, "c": 0.5, "d": 0.5, "e": 0.7}


def docs() -> list[dict]:
    return [
        {"id": i, "url": f"https://x.org/{i}", "text": f"text {i}", "title": "", "lang": "en"}
        for i in "abcdef"
    ]


def decide(config: CurationConfig) -> dict[str, str | None]:
    funnel = Funnel()
    out = {}
    for doc, reason in curate(docs(), SCORES, config):
        funnel.record(reason)
        out[doc["id"]] = reason
        if doc["id"] in SCORES:
            assert doc["quality_score"] == SCORES[doc["id"]]
        else:
            assert "quality_score" not in doc
    assert funnel.conserved and funnel.docs_in == 6
    return out


def test_threshold() -> None:
    assert decide(CurationConfig(threshold=0.5)) == {
        "a": None,
        "b": "low_quality",
        "c": None,
        "d": None,
        "e": None,
        "f": "unscored",
    }


def test_top_fraction_breaks_ties_by_id() -> None:
    # 5 scored docs: 0.6 keeps 3 -> a (0.9), e (0.7), then c before d (both 0.5)
    assert decide(CurationConfig(top_fraction=0.6)) == {
        "a": None,
        "b": "low_quality",
        "c": None,
        "d": "low_quality",
        "e": None,
        "f": "unscored",
    }
    reordered = dict(reversed(list(SCORES.items())))
    kept = {
        d["id"]
        for d, reason in curate(reversed(docs()), reordered, CurationConfig(top_fraction=0.6))
        if not reason
    }
    assert kept == {"a", "c", "e"}


def test_top_fraction_keeps_at_least_one() -> None:
    kept = [
        d["id"] for d, reason in curate(docs(), SCORES, CurationConfig(top_fraction=0.01)) if reason is None
    ]
    assert kept == ["a"]
    assert [r for _, r in curate(docs(), {}, CurationConfig(top_fraction=0.5))] == ["unscored"] * 6


def test_exactly_one_rule() -> None:
    for bad in ({}, {"threshold": 0.5, "top_fraction": 0.1}):
        with pytest.raises(ValidationError, match="set exactly one of threshold .* or top_fraction"):
            CurationConfig(**bad)
    with pytest.raises(ValidationError, match="top_fraction"):
        CurationConfig(top_fraction=1.5)
    with pytest.raises(ValidationError, match="threshold"):
        CurationConfig(threshold=-0.1)


def test_extremes_and_their_table() -> None:
    top, bottom = extreme_ids(SCORES, 2)
    ranked = sorted(SCORES, key=lambda i: -SCORES[i])
    assert top == ranked[:2] and bottom == ranked[-2:]
    assert extreme_ids({"a": 0.5, "b": 0.1}, 3) == (["a", "b"], [])  # never the same document twice
    table = examples_table(
        [{"id": "a", "url": "https://x/", "text": "one | two\nthree " + "z" * 300}], SCORES
    )
    header, rule, row = table.split("\n")
    assert header == "| score | url | text |" and row.startswith(
        f"| {SCORES['a']:.3f} | https://x/ | one \\| two three"
    )
    assert len(row) < 260  # the text is cut
