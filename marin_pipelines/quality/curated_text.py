"""Keep the documents the quality classifier likes, by an absolute threshold or a top fraction.

A threshold is simple and streams; a top fraction (DCLM keeps the best 10%) fixes the amount of data
whatever the score scale. Every removed document says why, and carries its score for inspection.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict, Field, model_validator

from marin_pipelines.documents import Decision, Document

LOW_QUALITY = "low_quality"
UNSCORED = "unscored"


class CurationConfig(BaseModel):
    """Exactly one rule: ``threshold`` (keep score >= threshold) or ``top_fraction`` (keep the best)."""

    model_config = ConfigDict(extra="forbid")

    threshold: float | None = Field(None, ge=0, le=1, description="keep documents scoring at least this")
    top_fraction: float | None = Field(
        None, gt=0, le=1, description="keep this fraction of the scored documents, best first"
    )

    @model_validator(mode="after")
    def _exactly_one_rule(self) -> CurationConfig:
        if (self.threshold is None) == (self.top_fraction is None):
            raise ValueError(
                "set exactly one of threshold (keep score >= threshold, in [0, 1]) "
                "or top_fraction (keep the best fraction, in (0, 1])"
            )
        return self


def top_ids(scores: dict[str, float], fraction: float) -> set[str]:
    """Ids of the ``round(fraction * len(scores))`` best scores (at least one)."""
    if not scores:
        return set()
    return set(_ranked(scores)[: max(1, round(fraction * len(scores)))])


def _ranked(scores: dict[str, float]) -> list[str]:
    """Ids best first; ties go to the smaller id."""
    return sorted(scores, key=lambda doc_id: (-scores[doc_id], doc_id))


def curate(docs: Iterable[Document], scores: dict[str, float], config: CurationConfig) -> Iterator[Decision]:
    """Keep or remove (``low_quality``, ``unscored``) each document; scored ones gain ``quality_score``.

    ``top_fraction`` ranks all of ``scores``, so ``scores`` should cover the same documents as ``docs``
    (the quality_scores asset does); scores of ids absent from ``docs`` still take places in the ranking.
    """
    kept = top_ids(scores, config.top_fraction) if config.top_fraction is not None else None
    for doc in docs:
        score = scores.get(doc["id"])
        if score is None:
            yield doc, UNSCORED
            continue
        keep = doc["id"] in kept if kept is not None else score >= config.threshold
        yield {**doc, "quality_score": score}, None if keep else LOW_QUALITY


def extreme_ids(scores: dict[str, float], n: int) -> tuple[list[str], list[str]]:
    """Ids of the ``n`` best (best first) and the ``n`` worst (worst last) scores, never overlapping."""
    ranked = _ranked(scores)
    return ranked[:n], ranked[max(n, len(ranked) - n) :]


def examples_table(docs: list[Document], scores: dict[str, float], chars: int = 200) -> str:
    """A markdown table of documents in the given order: score, url and the opening of the text."""

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    rows = [
        f"| {scores[doc['id']]:.3f} | {cell(doc.get('url') or '')} | {cell(doc['text'][:chars])} |"
        for doc in docs
    ]
    return "| score | url | text |\n|---:|---|---|\n" + "\n".join(rows)
