"""WARC files to deduplicated text as one snapshot, outside Dagster: the command line's ``process-crawl``,
``bench/`` and tests call it.

The same stage functions and store layout as the assets (``{out}/process_crawl/{stage}/{snapshot}/
{version}/`` with a manifest), so outputs are reused by version on a second run; the given files are one
snapshot, versioned by their names, sizes and modification times.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from marin_pipelines.crawl.snapshots import SNAPSHOT_KEY, SNAPSHOT_RULE
from marin_pipelines.crawl.web_documents import crawl_path, find_warc_files
from marin_pipelines.engine import Engine
from marin_pipelines.experiments.defaults import listed_files_and_text
from marin_pipelines.stages.crawl import where_documents_ran_out
from marin_pipelines.step_runner import run_steps
from marin_pipelines.store import ArtifactStore

EXPERIMENT = "process_crawl"


def document_stages() -> tuple[str, ...]:
    """The chain's document stages in order, as its stages say (the chain declared over no file)."""
    return tuple(
        step.stage.name for step in listed_files_and_text(EXPERIMENT, [], "-") if step.stage.documents
    )


DOCUMENT_STAGES = document_stages()  # what bench/ and the tests read back


def process_crawl(
    warc_paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    snapshot: str = "cli",
    engine: Engine | None = None,
    configs: dict[str, BaseModel] | None = None,
    progress: Callable[[str], None] = lambda _: None,
    note: Callable[[str], None] = lambda _: None,
) -> dict[str, dict[str, Any]]:
    """Read, extract, filter and deduplicate the files as one snapshot; returns each stage's funnel.

    ``configs`` overrides a stage's config by stage name (``web_documents``, ``extract``, ``filters``,
    ``dedup``), as an experiment's ``crawl_and_text`` would. ``note`` is told what the reader could not
    read (damaged or truncated files: a line per file) and, when no document is left, which stage removed
    them all and why (a counted outcome, not an error). ``engine`` runs the stages' units (one process when
    None); ``progress`` hears each stage's units done and its output.
    The steps run through ``step_runner.run_steps``, as ``forecast``'s do."""
    if not SNAPSHOT_KEY.fullmatch(snapshot):
        raise ValueError(f"--snapshot {snapshot!r}: use {SNAPSHOT_RULE}")
    files = [f for path in warc_paths for f in find_warc_files(crawl_path(path))]
    steps = list(listed_files_and_text(EXPERIMENT, [str(f) for f in files], snapshot, **(configs or {})))
    store = ArtifactStore(out)
    run = run_steps(steps, store, engine=engine, log=progress)
    for step in steps:
        for line in damage_report(run.partitions(step)[snapshot].metadata.get("records", {})):
            note(line)  # web_documents' reader: the files it found damaged
    last = run.partitions(steps[-1])[snapshot]
    if not last.metadata["funnel"]["docs_out"]:
        note(f"no documents left: {where_documents_ran_out(store, steps[-1:])}")
    return {
        step.stage.name: run.partitions(step)[snapshot].metadata["funnel"]
        for step in steps
        if step.stage.documents
    }


def damage_report(records: dict[str, Any], most: int = 3) -> list[str]:
    """Lines for the files the reader found damaged, from ``web_documents``' ``records`` metadata: a line a
    file, with the bytes and gzip members skipped there and its first errors."""
    skipped: dict[str, dict[str, int]] = records.get("skipped", {}).get("files", {})
    errors: list[str] = records.get("errors", [])
    files = sorted({*skipped, *(error.split(": ", 1)[0] for error in errors)})
    if not files:
        return []
    lines = [f"{len(files)} damaged files: what could not be read was skipped, the rest of each was read"]
    for name in files:
        said = [error.split(": ", 1)[-1] for error in errors if error.startswith(f"{name}: ")]
        lost = skipped.get(name)
        parts = [f"skipped {lost['bytes']} bytes, {lost['members']} gzip members"] if lost else []
        more = f"; and {len(said) - most} more errors" if len(said) > most else ""
        lines.append(f"{name}: " + "; ".join(parts + said[:most]) + more)
    return lines
