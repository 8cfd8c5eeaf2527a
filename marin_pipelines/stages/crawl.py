"""The crawl (WARC files) and the web documents read from them, one partition per crawl snapshot."""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.crawl.demo_crawl import DemoCrawlConfig, build_demo_crawl
from marin_pipelines.crawl.snapshots import (
    crawl_fingerprint,
    crawl_snapshots,
    files_fingerprint,
    snapshot_files,
)
from marin_pipelines.crawl.web_documents import (
    WebDocumentsConfig,
    crawl_path,
    find_warc_files,
    write_web_documents,
)
from marin_pipelines.documents import Document, Funnel, funnel_conserved, read_documents
from marin_pipelines.steps import FUNNEL_CHECK, Check, InputError, Step, StepContext, stage, topological
from marin_pipelines.store import Artifact, ArtifactStore, PendingArtifact

Snapshots = dict[str, Artifact]  # an upstream's output for every crawl snapshot, by snapshot key
FUNNEL = {FUNNEL_CHECK: Check(funnel_conserved)}  # what makes a stage a document stage (Stage.documents)
# a document stage: one output per crawl snapshot, its funnel checked, its units run on the engine resource
PER_SNAPSHOT: dict[str, Any] = {
    "partitioning": "snapshot",
    "checks": FUNNEL,
    "kinds": ("parquet",),
    "needs": ("engine",),
}


class CrawlConfig(BaseModel):
    """Where the WARC files come from: a folder of the user's, or the embedded demo crawl."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    warc_root: str | None = Field(
        None,
        description="folder or gs:// prefix of snapshot folders (or of WARC/ARC files: one snapshot); "
        "None builds the demo crawl",
    )
    demo: DemoCrawlConfig = Field(
        DemoCrawlConfig(), description="what the demo crawl contains, when warc_root is None"
    )

    def snapshots(self, strict: bool = False) -> list[str]:
        """The crawl's snapshot keys, read from the crawl root now. An unreadable root gives [] (loading
        definitions never fails on it) unless ``strict``: then the clear error naming the root."""
        try:
            return crawl_snapshots(self.warc_root)
        except (FileNotFoundError, ValueError):
            if strict:
                raise
            return []


def crawl_content(config: CrawlConfig) -> Any:
    """What the crawl's content depends on: a single-snapshot root's files, or the demo's Python."""
    if config.warc_root is None:
        return {"python": platform.python_version()}
    return crawl_fingerprint(config.warc_root)


@stage(
    CrawlConfig,
    revision=2,
    partitioning="snapshot",
    kinds=("warc",),
    fingerprint=crawl_content,
    partition_keys=CrawlConfig.snapshots,
)
def crawl(ctx: StepContext, out: PendingArtifact, config: CrawlConfig) -> None:
    """WARC files of one crawl snapshot: a folder of the crawl root (listed, not copied), or the demo."""
    if config.warc_root is None:
        out.metadata["demo_crawl"] = build_demo_crawl(out.path / "warc", config.demo)
        files = find_warc_files(out.path / "warc")
        out.metadata["warc_files"] = [str(p.relative_to(out.path)) for p in files]
    else:
        files = snapshot_files(config.warc_root, out.partition)
        out.metadata["warc_root"] = config.warc_root
        out.metadata["warc_files"] = [str(p if "://" in str(p) else p.resolve()) for p in files]
    out.metadata["snapshot"] = out.partition
    out.metadata["warc_bytes"] = sum(p.stat().st_size for p in files)


class ListedFiles(BaseModel):
    """WARC files named one by one, as one snapshot (``marin-pipelines process-crawl``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: list[str] = Field(description="the WARC files, paths or URLs, named one by one")
    snapshot: str = Field("cli", description="the snapshot key the files are processed as")

    def snapshots(self, strict: bool = False) -> list[str]:
        return [self.snapshot]


def listed_content(config: ListedFiles) -> Any:
    """The files' names, sizes and modification times: a changed file is a new crawl."""
    return files_fingerprint([crawl_path(f) for f in config.files])


@stage(
    ListedFiles,
    revision=2,
    partitioning="snapshot",
    kinds=("warc",),
    fingerprint=listed_content,
    partition_keys=ListedFiles.snapshots,
)
def listed_warc_files(ctx: StepContext, out: PendingArtifact, config: ListedFiles) -> None:
    """WARC files given by name (listed, not copied)."""
    files = [crawl_path(f) for f in config.files]
    out.metadata.update(
        snapshot=out.partition,
        warc_files=[str(p if "://" in str(p) else p.resolve()) for p in files],
        warc_bytes=sum(p.stat().st_size for p in files),
    )


@stage(WebDocumentsConfig, revision=2, **PER_SNAPSHOT)
def web_documents(
    ctx: StepContext, out: PendingArtifact, config: WebDocumentsConfig, crawl: Artifact
) -> None:
    """HTML pages read from the WARC responses; unreadable or non-HTML records counted by reason."""
    paths = [  # URLs and absolute paths as they are; the demo's files where the crawl artifact lives
        crawl_path(name if "://" in name or Path(name).is_absolute() else f"{crawl.url}/{name}")
        for name in crawl.metadata["warc_files"]
    ]
    funnel, stats = write_web_documents(paths, out.work, config, ctx.engine, ctx.progress("WARC files"))
    out.keep_work()
    out.metadata["funnel"] = funnel.as_dict()
    out.metadata["records"] = stats.as_dict()  # record types seen, and what could not be read


def snapshot_documents(
    ctx: StepContext, artifacts: Snapshots, columns: list[str] | None = None
) -> Iterator[Document]:
    """The documents of every snapshot's output, in snapshot order, for the steps that read them all.

    Their version covers the crawl's snapshots (``Step.snapshots``); a snapshot that exists but has not
    been processed, or one processed that no longer exists, is an error naming it.
    """
    expected = ctx.step.snapshots
    if not expected:
        raise FileNotFoundError(
            f"{ctx.step.name} reads a crawl without a readable snapshot: check its crawl root"
        )
    if sorted(artifacts) != expected:
        missing, extra = sorted(set(expected) - set(artifacts)), sorted(set(artifacts) - set(expected))
        raise FileNotFoundError(
            f"the crawl's snapshots are {expected}: not yet processed {missing}, no longer in the crawl "
            f"{extra}; run the snapshot job for each new snapshot first"
        )
    for snapshot in expected:
        yield from read_documents(artifacts[snapshot].path, columns=columns)


class NoDocuments(InputError):
    """A step found no document to work on: the message says which upstream step removed them, and why."""


def no_documents(ctx: StepContext, doing: str) -> NoDocuments:
    """The error of a step that has no document to ``doing`` (e.g. "train a tokenizer on")."""
    why = where_documents_ran_out(ctx.store, ctx.step.inputs.values())
    return NoDocuments(f"{ctx.step.name} has no documents to {doing}: {why}")


def where_documents_ran_out(store: ArtifactStore, steps: Iterable[Step]) -> str:
    """The first step of ``steps`` and their upstreams (from the crawl on) whose funnel kept no document,
    over all its snapshots, with its reasons; a crawl without HTML captures says what records its WARC
    files hold instead."""
    for step in topological(steps):
        partitions: list[str | None] = list(step.partition_keys()) if step.partitioning else [None]
        artifacts = [store.get(step.key, step.version, p) for p in partitions]
        outputs = [a.metadata for a in artifacts if a is not None and "funnel" in a.metadata]
        if not outputs:
            continue
        funnel = sum((Funnel.from_dict(m["funnel"]) for m in outputs), Funnel())
        if funnel.docs_out:
            continue
        where = f" [{', '.join(map(str, partitions))}]" if step.partitioning else ""
        if funnel.docs_in:
            reasons = ", ".join(f"{reason}: {n}" for reason, n in funnel.removed.most_common())
            return f"{step.name}{where} removed all {funnel.docs_in} documents ({reasons})"
        if "records" not in outputs[0]:
            return f"{step.name}{where} received no documents"
        records: Counter[str] = Counter()
        problems: list[str] = []
        empty: list[str] = []
        for metadata in outputs:
            records.update(metadata["records"].get("records", {}))
            problems += metadata["records"].get("errors", [])
            empty += metadata["records"].get("empty_files", [])
        seen = ", ".join(f"{kind}: {n}" for kind, n in records.most_common()) or "none"
        seen += f"; empty files (0 bytes): {', '.join(empty[:5])}" if empty else ""
        seen += f"; could not read: {'; '.join(problems[:3])}" if problems else ""
        return f"{step.name}{where} found no HTML captures in the WARC files (records: {seen})"
    return "no upstream step's funnel says where they went"
