"""Quality: a fastText classifier trained in the run scores every document; the best are kept."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import AssetsDefinition

from marin_pipelines.assets.stage import funnel_conserved, stage_asset
from marin_pipelines.documents import read_documents, write_stage
from marin_pipelines.experiment import Experiment
from marin_pipelines.quality.curated_text import curate
from marin_pipelines.quality.quality_scores import (
    load_reference_texts,
    score_documents,
    train_quality_classifier,
)
from marin_pipelines.store import Artifact, PendingArtifact

SCORES = "scores.parquet"
MODEL = "classifier.bin"


def quality_assets(experiment: Experiment) -> list[AssetsDefinition]:
    config = experiment.quality

    @stage_asset(experiment, "quality_scores", group="data", ins=("deduplicated_text",))
    def quality_scores(out: PendingArtifact, deduplicated_text: Artifact) -> None:
        """A fastText classifier (reference documents vs crawl sample) and every document's score."""
        positives = load_reference_texts(config.reference)
        negatives = [doc["text"] for doc in read_documents(deduplicated_text.path, columns=["text"])]
        out.metadata["classifier"] = train_quality_classifier(positives, negatives, config, out.path / MODEL)
        ids, scores = zip(
            *score_documents(out.path / MODEL, read_documents(deduplicated_text.path)), strict=True
        )
        pq.write_table(pa.table({"id": list(ids), "score": list(scores)}), out.path / SCORES)
        out.metadata.update(documents_scored=len(ids), mean_score=sum(scores) / len(ids))

    @stage_asset(
        experiment,
        "curated_text",
        group="data",
        ins=("deduplicated_text", "quality_scores"),
        checks={"funnel": funnel_conserved},
    )
    def curated_text(out: PendingArtifact, deduplicated_text: Artifact, quality_scores: Artifact) -> None:
        """Documents kept by quality threshold or top fraction: the training text."""
        table = pq.read_table(quality_scores.file(SCORES))
        scores = dict(zip(table["id"].to_pylist(), table["score"].to_pylist(), strict=True))
        kept = curate(read_documents(deduplicated_text.path), scores, experiment.curation)
        out.metadata["funnel"] = write_stage(kept, out.path).as_dict()

    return [quality_scores, curated_text]
