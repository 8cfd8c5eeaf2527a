"""Text steps, per crawl snapshot: extraction, heuristic quality filters, exact and fuzzy dedup."""

from __future__ import annotations

from marin_pipelines.documents import run_stage
from marin_pipelines.stages.crawl import PER_SNAPSHOT, Snapshots
from marin_pipelines.steps import StepContext, stage
from marin_pipelines.store import Artifact, PendingArtifact
from marin_pipelines.text.dedup_partitions import deduplicate_snapshot
from marin_pipelines.text.deduplicated_text import DedupConfig
from marin_pipelines.text.extracted_text import ExtractConfig, extract_text
from marin_pipelines.text.filtered_text import FilterConfig, filter_text


@stage(ExtractConfig, revision=2, **PER_SNAPSHOT)
def extracted_text(
    ctx: StepContext, out: PendingArtifact, config: ExtractConfig, web_documents: Artifact
) -> None:
    """Main-content text (light markdown), title and language id of every page (resiliparse)."""
    funnel = run_stage(extract_text, config, web_documents.url, out.work, ctx.engine, ctx.progress("shards"))
    out.keep_work()
    out.metadata["funnel"] = funnel.as_dict()


@stage(FilterConfig, revision=2, **PER_SNAPSHOT)
def filtered_text(
    ctx: StepContext, out: PendingArtifact, config: FilterConfig, extracted_text: Artifact
) -> None:
    """Language, Gopher, C4 and FineWeb rules; each removed document keeps the rule that removed it."""
    funnel = run_stage(filter_text, config, extracted_text.url, out.work, ctx.engine, ctx.progress("shards"))
    out.keep_work()
    out.metadata["funnel"] = funnel.as_dict()


@stage(DedupConfig, revision=3, **PER_SNAPSHOT)
def deduplicated_text(
    ctx: StepContext, out: PendingArtifact, config: DedupConfig, filtered_text: Artifact, **against: Snapshots
) -> None:
    """Exact paragraph dedup, then fuzzy document dedup (MinHash LSH), also against earlier snapshots and
    every snapshot of the ``against`` inputs (other crawls' or corpora's dedup): map steps over shards and
    hash partitions, so that it scales out on the engine."""
    others = [artifact.url for name in sorted(against) for _, artifact in sorted(against[name].items())]
    earlier = earlier_dedup_indexes(ctx, out.partition) + others
    metadata = deduplicate_snapshot(filtered_text.url, out.work, config, earlier, ctx.engine, ctx.progress)
    out.keep_work()
    out.metadata.update(metadata)


def earlier_dedup_indexes(ctx: StepContext, snapshot: str | None) -> list[str]:
    """The outputs of every snapshot before ``snapshot``, at this version; one not processed is an error."""
    step = ctx.step
    snapshots = step.snapshots
    if snapshot not in snapshots:
        raise FileNotFoundError(f"snapshot {snapshot!r} is not in the crawl (its snapshots: {snapshots})")
    paths = []
    for earlier in snapshots[: snapshots.index(snapshot)]:
        artifact = ctx.store.get(step.key, step.version, earlier)
        if artifact is None:
            raise FileNotFoundError(
                f"{step.name} [{snapshot}] removes documents seen in earlier snapshots, but snapshot "
                f"{earlier!r} has no output at version {step.version}: process the snapshots in order"
            )
        paths.append(artifact.url)
    return paths
