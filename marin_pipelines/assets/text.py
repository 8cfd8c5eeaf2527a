"""Text stages, per crawl snapshot: extraction, heuristic quality filters, exact and fuzzy dedup."""

from __future__ import annotations

from pathlib import Path

from dagster import AssetsDefinition

from marin_pipelines.assets.crawl import snapshot_partitions
from marin_pipelines.assets.stage import funnel_conserved, stage_asset
from marin_pipelines.documents import run_stage
from marin_pipelines.experiment import Experiment
from marin_pipelines.resources.store import ArtifactStoreResource
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.text.deduplicated_text import deduplicate_snapshot
from marin_pipelines.text.extracted_text import extract_text
from marin_pipelines.text.filtered_text import filter_text

CHECKS = {"funnel": funnel_conserved}


def text_assets(experiment: Experiment) -> list[AssetsDefinition]:
    snapshots = snapshot_partitions(experiment)
    workers = experiment.workers

    per_snapshot = {"group": "data", "checks": CHECKS, "partitions_def": snapshots}

    @stage_asset(experiment, "extracted_text", ins=("web_documents",), **per_snapshot)
    def extracted_text(out: PendingArtifact, web_documents: Artifact) -> None:
        """Main-content text (light markdown), title and language id of every page (resiliparse)."""
        funnel = run_stage(extract_text, experiment.extract, web_documents.path, out.path, workers)
        out.metadata["funnel"] = funnel.as_dict()

    @stage_asset(experiment, "filtered_text", ins=("extracted_text",), **per_snapshot)
    def filtered_text(out: PendingArtifact, extracted_text: Artifact) -> None:
        """Language, Gopher, C4 and FineWeb rules; each removed document keeps the rule that removed it."""
        funnel = run_stage(filter_text, experiment.filters, extracted_text.path, out.path, workers)
        out.metadata["funnel"] = funnel.as_dict()

    @stage_asset(
        experiment, "deduplicated_text", ins=("filtered_text",), resources=("store",), **per_snapshot
    )
    def deduplicated_text(
        out: PendingArtifact, filtered_text: Artifact, store: ArtifactStoreResource
    ) -> None:
        """Exact paragraph dedup, then fuzzy document dedup (MinHash LSH), also against earlier snapshots."""
        earlier = earlier_dedup_indexes(experiment, store, out.partition)
        out.metadata.update(deduplicate_snapshot(filtered_text.path, out.path, experiment.dedup, earlier))

    return [extracted_text, filtered_text, deduplicated_text]


def earlier_dedup_indexes(experiment: Experiment, store: ArtifactStoreResource, snapshot: str) -> list[Path]:
    """The outputs of every snapshot before ``snapshot``, at this version; one not processed is an error."""
    key, version = [experiment.name, "deduplicated_text"], experiment.versions["deduplicated_text"]
    snapshots = experiment.snapshots
    if snapshot not in snapshots:
        raise FileNotFoundError(f"snapshot {snapshot!r} is not in the crawl (its snapshots: {snapshots})")
    paths = []
    for earlier in snapshots[: snapshots.index(snapshot)]:
        artifact = store.store().get(key, version, earlier)
        if artifact is None:
            raise FileNotFoundError(
                f"deduplicated_text [{snapshot}] removes documents seen in earlier snapshots, but snapshot "
                f"{earlier!r} has no output at version {version}: process the snapshots in order"
            )
        paths.append(artifact.path)
    return paths
