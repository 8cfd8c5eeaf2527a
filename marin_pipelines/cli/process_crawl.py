"""`marin-pipelines process-crawl`: WARC files to deduplicated text without the UI.

The same stage functions and store layout as the assets (``{out}/process_crawl/{stage}/{snapshot}/
{version}/`` with a manifest), so outputs are reused by version on a second run; the given files are
one snapshot, versioned by their names, sizes and modification times. The last line printed is the
funnel of every stage as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from marin_pipelines.cpu_limit import available_cpus

if TYPE_CHECKING:
    from pydantic import BaseModel

EXPERIMENT = "process_crawl"
DOCUMENT_STAGES = ("web_documents", "extracted_text", "filtered_text", "deduplicated_text")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "process-crawl", help="WARC files -> deduplicated text, printing the funnel"
    )
    parser.add_argument("--warc", nargs="+", required=True, metavar="PATH", help="WARC/ARC files or folders")
    parser.add_argument("--out", required=True, help="store root for the outputs (a folder)")
    parser.add_argument("--snapshot", default="cli", help="the snapshot key the outputs are filed under")
    parser.add_argument(
        "--workers", type=int, default=available_cpus(), help="worker processes (default: the CPU limit)"
    )
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    def note(message: str) -> None:
        print(f"marin-pipelines: note: {message}", file=sys.stderr)

    funnels = process_crawl(args.warc, args.out, args.snapshot, args.workers, progress=print, note=note)
    print(json.dumps(funnels, sort_keys=True))
    return 0


def process_crawl(
    warc_paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    snapshot: str = "cli",
    workers: int = 1,
    configs: dict[str, BaseModel] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    note: Callable[[str], None] = lambda _: None,
) -> dict[str, dict[str, Any]]:
    """Read, extract, filter and deduplicate the files as one snapshot; returns each stage's funnel.

    ``configs`` overrides a stage's config by stage name (``web_documents``, ``extract``, ``filters``,
    ``dedup``), as an experiment's ``crawl_and_text`` would. When no document is left, ``note`` is told
    which stage removed them all and why (a counted outcome, not an error)."""
    from marin_pipelines.crawl.snapshots import SNAPSHOT_KEY, SNAPSHOT_RULE  # here: `--help` stays fast
    from marin_pipelines.crawl.web_documents import crawl_path, find_warc_files
    from marin_pipelines.experiments.defaults import listed_files_and_text
    from marin_pipelines.stages.crawl import where_documents_ran_out
    from marin_pipelines.steps import StepContext, build_step
    from marin_pipelines.store import ArtifactStore

    if not SNAPSHOT_KEY.fullmatch(snapshot):
        raise ValueError(f"--snapshot {snapshot!r}: use {SNAPSHOT_RULE}")
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, not {workers}")
    files = [f for path in warc_paths for f in find_warc_files(crawl_path(path))]
    steps = list(listed_files_and_text(EXPERIMENT, [str(f) for f in files], snapshot, **(configs or {})))
    store = ArtifactStore(out)
    artifacts = {}
    for step in steps:
        inputs = {name: artifacts[upstream.name] for name, upstream in step.inputs.items()}
        artifacts[step.name] = build_step(StepContext(step, store, snapshot, workers=workers), inputs)
        progress(f"{step.stage.name}: {artifacts[step.name].path}")
    if not artifacts[steps[-1].name].metadata["funnel"]["docs_out"]:
        note(f"no documents left: {where_documents_ran_out(store, steps[-1:])}")
    return {step.stage.name: artifacts[step.name].metadata["funnel"] for step in steps[1:]}
