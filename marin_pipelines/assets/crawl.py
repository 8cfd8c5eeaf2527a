"""The crawl (WARC files) and the web documents read from them."""

from __future__ import annotations

from pathlib import Path

from dagster import AssetsDefinition

from marin_pipelines.assets.stage import funnel_conserved, stage_asset
from marin_pipelines.crawl.demo_crawl import build_demo_crawl
from marin_pipelines.crawl.web_documents import ReadStats, find_warc_files, read_web_documents
from marin_pipelines.documents import write_stage
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import Artifact, PendingArtifact


def crawl_assets(experiment: Experiment) -> list[AssetsDefinition]:
    @stage_asset(experiment, "crawl", group="data")
    def crawl(out: PendingArtifact) -> None:
        """WARC files of one crawl: the user's folder (listed, not copied), or the embedded demo crawl."""
        root = experiment.crawl.warc_root
        if root is None:
            out.metadata["demo_crawl"] = build_demo_crawl(out.path / "warc", experiment.crawl.demo)
            files = find_warc_files(out.path / "warc")
            out.metadata["warc_files"] = [str(p.relative_to(out.path)) for p in files]
        else:
            files = find_warc_files(Path(root))
            out.metadata["warc_root"] = root
            out.metadata["warc_files"] = [str(p.resolve()) for p in files]
        out.metadata["warc_bytes"] = sum(p.stat().st_size for p in files)

    @stage_asset(
        experiment, "web_documents", group="data", ins=("crawl",), checks={"funnel": funnel_conserved}
    )
    def web_documents(out: PendingArtifact, crawl: Artifact) -> None:
        """HTML pages read from the WARC responses; unreadable or non-HTML records counted by reason."""
        paths = [crawl.path / name for name in crawl.metadata["warc_files"]]  # absolute names stay absolute
        stats = ReadStats()
        out.metadata["funnel"] = write_stage(
            read_web_documents(paths, experiment.web_documents, stats), out.path
        ).as_dict()
        out.metadata["records"] = stats.as_dict()  # record types seen, and what could not be read

    return [crawl, web_documents]
