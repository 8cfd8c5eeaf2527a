"""Text stages: main-content extraction, heuristic quality filters, exact and fuzzy dedup."""

from __future__ import annotations

from dagster import AssetsDefinition

from marin_pipelines.assets.stage import funnel_conserved, stage_asset
from marin_pipelines.documents import read_documents, write_stage
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.text.deduplicated_text import deduplicate
from marin_pipelines.text.extracted_text import extract_text
from marin_pipelines.text.filtered_text import filter_text

CHECKS = {"funnel": funnel_conserved}


def text_assets(experiment: Experiment) -> list[AssetsDefinition]:
    @stage_asset(experiment, "extracted_text", group="data", ins=("web_documents",), checks=CHECKS)
    def extracted_text(out: PendingArtifact, web_documents: Artifact) -> None:
        """Main-content text (light markdown), title and language id of every page (resiliparse)."""
        docs = read_documents(web_documents.path)
        out.metadata["funnel"] = write_stage(extract_text(docs, experiment.extract), out.path).as_dict()

    @stage_asset(experiment, "filtered_text", group="data", ins=("extracted_text",), checks=CHECKS)
    def filtered_text(out: PendingArtifact, extracted_text: Artifact) -> None:
        """Language, Gopher, C4 and FineWeb rules; each removed document keeps the rule that removed it."""
        docs = read_documents(extracted_text.path)
        out.metadata["funnel"] = write_stage(filter_text(docs, experiment.filters), out.path).as_dict()

    @stage_asset(experiment, "deduplicated_text", group="data", ins=("filtered_text",), checks=CHECKS)
    def deduplicated_text(out: PendingArtifact, filtered_text: Artifact) -> None:
        """Exact paragraph dedup, then fuzzy document dedup with MinHash LSH."""
        docs = read_documents(filtered_text.path)
        out.metadata["funnel"] = write_stage(deduplicate(docs, experiment.dedup), out.path).as_dict()

    return [extracted_text, filtered_text, deduplicated_text]
