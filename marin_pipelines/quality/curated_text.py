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
    """Ids of the ``round(fraction * len(scores))`` best scores (at least one); ties go to the smaller id."""
    if not scores:
        return set()
    ranked = sorted(scores, key=lambda doc_id: (-scores[doc_id], doc_id))
    return set(ranked[: max(1, round(fraction * len(scores)))])


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
