"""`marin-pipelines process-crawl`: WARC files to deduplicated text without the UI.

The same core functions and store layout as the assets (``{out}/{experiment}/{stage}/{snapshot}/
{version}/`` with a manifest), so outputs are reused by version on a second run; the given files are
one snapshot, versioned by their names, sizes and modification times. The last line printed is the
funnel of every stage as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marin_pipelines.experiment import Experiment
    from marin_pipelines.store import Artifact, PendingArtifact

EXPERIMENT = "process_crawl"
DOCUMENT_STAGES = ("web_documents", "extracted_text", "filtered_text", "deduplicated_text")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "process-crawl", help="WARC files -> deduplicated text, printing the funnel"
    )
    parser.add_argument("--warc", nargs="+", required=True, metavar="PATH", help="WARC/ARC files or folders")
    parser.add_argument("--out", required=True, help="store root for the outputs (a folder)")
    parser.add_argument("--snapshot", default="cli", help="the snapshot key the outputs are filed under")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    funnels = process_crawl(args.warc, args.out, args.snapshot, args.workers, progress=print)
    print(json.dumps(funnels, sort_keys=True))
    return 0


def process_crawl(
    warc_paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    snapshot: str = "cli",
    workers: int = 1,
    experiment: Experiment | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, dict[str, Any]]:
    """Read, extract, filter and deduplicate the files as one snapshot; returns each stage's funnel."""
    from marin_pipelines.crawl.snapshots import SNAPSHOT_KEY, files_fingerprint  # here: `--help` stays fast
    from marin_pipelines.crawl.web_documents import crawl_path, find_warc_files, write_web_documents
    from marin_pipelines.documents import run_stage
    from marin_pipelines.experiment import Experiment
    from marin_pipelines.store import ArtifactStore
    from marin_pipelines.text.deduplicated_text import deduplicate_snapshot
    from marin_pipelines.text.extracted_text import extract_text
    from marin_pipelines.text.filtered_text import filter_text

    if not SNAPSHOT_KEY.fullmatch(snapshot):
        raise ValueError(f"--snapshot {snapshot!r}: use letters, digits, '.', '_' and '-'")
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, not {workers}")
    experiment = experiment or Experiment.build(name=EXPERIMENT)
    files = [f for path in warc_paths for f in find_warc_files(crawl_path(path))]
    versions = experiment.stage_versions(files_fingerprint(files), [snapshot])
    store = ArtifactStore(out)

    def stage(name: str, build: Callable[[PendingArtifact], None]) -> Artifact:
        key, version = [experiment.name, name], versions[name]
        artifact = store.get(key, version, snapshot)
        if artifact is None:
            with store.write(key, version, snapshot, experiment.stage_config(name)) as pending:
                build(pending)
            artifact = store.get(key, version, snapshot)
            assert artifact is not None
        progress(f"{name}: {artifact.path}")
        return artifact

    def crawl(pending: PendingArtifact) -> None:
        pending.metadata.update(
            snapshot=snapshot,
            warc_files=[str(p if "://" in str(p) else p.resolve()) for p in files],
            warc_bytes=sum(p.stat().st_size for p in files),
        )

    def web_documents(pending: PendingArtifact) -> None:
        funnel, stats = write_web_documents(files, pending.path, experiment.web_documents, workers)
        pending.metadata.update(funnel=funnel.as_dict(), records=stats.as_dict())

    stage("crawl", crawl)
    web = stage("web_documents", web_documents)

    def per_document(function: Callable, config: Any, source: Artifact) -> Callable[[PendingArtifact], None]:
        def build(pending: PendingArtifact) -> None:
            funnel = run_stage(function, config, source.path, pending.path, workers)
            pending.metadata["funnel"] = funnel.as_dict()

        return build

    def deduplicated_text(pending: PendingArtifact) -> None:
        pending.metadata.update(deduplicate_snapshot(filtered.path, pending.path, experiment.dedup))

    extracted = stage("extracted_text", per_document(extract_text, experiment.extract, web))
    filtered = stage("filtered_text", per_document(filter_text, experiment.filters, extracted))
    deduplicated = stage("deduplicated_text", deduplicated_text)
    outputs = (web, extracted, filtered, deduplicated)
    return {
        name: artifact.metadata["funnel"] for name, artifact in zip(DOCUMENT_STAGES, outputs, strict=True)
    }
