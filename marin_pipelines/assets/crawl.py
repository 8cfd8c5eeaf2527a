"""The crawl (WARC files) and the web documents read from them, one partition per crawl snapshot."""

from __future__ import annotations

from collections.abc import Iterator

from dagster import AssetsDefinition, DynamicPartitionsDefinition

from marin_pipelines.assets.stage import funnel_conserved, stage_asset
from marin_pipelines.crawl.demo_crawl import build_demo_crawl
from marin_pipelines.crawl.snapshots import snapshot_files
from marin_pipelines.crawl.web_documents import crawl_path, find_warc_files, write_web_documents
from marin_pipelines.documents import Document, read_documents
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import Artifact, PendingArtifact

Snapshots = dict[str, Artifact]  # an upstream's output for every crawl snapshot, by snapshot key


def snapshot_partitions(experiment: Experiment) -> DynamicPartitionsDefinition:
    """The experiment's crawl snapshots. Named per experiment: experiments may crawl different roots."""
    return DynamicPartitionsDefinition(name=f"{experiment.name}_crawl_snapshot")


def snapshot_documents(
    experiment: Experiment, artifacts: Snapshots, columns: list[str] | None = None
) -> Iterator[Document]:
    """The documents of every snapshot's output, in snapshot order, for the stages that read them all.

    Their version covers the crawl's snapshots (``Experiment.stage_versions``); a snapshot that exists
    but has not been processed, or one processed that no longer exists, is an error naming it.
    """
    expected = experiment.snapshots
    if sorted(artifacts) != expected:
        missing, extra = sorted(set(expected) - set(artifacts)), sorted(set(artifacts) - set(expected))
        raise FileNotFoundError(
            f"the crawl's snapshots are {expected}: not yet processed {missing}, no longer in the crawl "
            f"{extra}; run the snapshot job for each new snapshot first"
        )
    for snapshot in expected:
        yield from read_documents(artifacts[snapshot].path, columns=columns)


def crawl_assets(experiment: Experiment) -> list[AssetsDefinition]:
    snapshots = snapshot_partitions(experiment)

    @stage_asset(experiment, "crawl", group="data", partitions_def=snapshots)
    def crawl(out: PendingArtifact) -> None:
        """WARC files of one crawl snapshot: a folder of the crawl root (listed, not copied), or the demo."""
        root = experiment.crawl.warc_root
        if root is None:
            out.metadata["demo_crawl"] = build_demo_crawl(out.path / "warc", experiment.crawl.demo)
            files = find_warc_files(out.path / "warc")
            out.metadata["warc_files"] = [str(p.relative_to(out.path)) for p in files]
        else:
            files = snapshot_files(root, out.partition)
            out.metadata["warc_root"] = root
            out.metadata["warc_files"] = [str(p if "://" in str(p) else p.resolve()) for p in files]
        out.metadata["snapshot"] = out.partition
        out.metadata["warc_bytes"] = sum(p.stat().st_size for p in files)

    @stage_asset(
        experiment,
        "web_documents",
        group="data",
        ins=("crawl",),
        checks={"funnel": funnel_conserved},
        partitions_def=snapshots,
    )
    def web_documents(out: PendingArtifact, crawl: Artifact) -> None:
        """HTML pages read from the WARC responses; unreadable or non-HTML records counted by reason."""
        paths = [
            crawl_path(name) if "://" in name else crawl.path / name  # absolute names stay absolute
            for name in crawl.metadata["warc_files"]
        ]
        funnel, stats = write_web_documents(paths, out.path, experiment.web_documents, experiment.workers)
        out.metadata["funnel"] = funnel.as_dict()
        out.metadata["records"] = stats.as_dict()  # record types seen, and what could not be read

    return [crawl, web_documents]
