"""Crawl snapshots: the folders of a crawl root, each one partition of the per-document stages.

A crawl root is a local folder or an fsspec URL (``gs://bucket/crawl``, ``memory://...`` in tests)::

    root/CC-MAIN-2024-10/**/*.warc.gz   one snapshot per immediate subfolder holding WARC/ARC files
    root/*.warc.gz                      or, without such subfolders, the root itself is one snapshot

Snapshot keys sort in processing order (Common Crawl's ``CC-MAIN-YYYY-WW`` do): cross-snapshot dedup
keeps the copy of the snapshot that sorts first. A snapshot of a multi-snapshot root is immutable once
processed (as published crawls are): a new crawl is a new folder, found by the sensor and processed
alone, without recomputing the others. A single-snapshot root is versioned by its files instead, so
adding a file to it recomputes it (``crawl_fingerprint``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from upath import UPath

from marin_pipelines.crawl.web_documents import crawl_path, find_warc_files, is_warc_file

DEMO_SNAPSHOT = "demo"  # the one snapshot of the embedded demo crawl
# A snapshot key is a Dagster partition key and a folder of the store: letters (any script), digits, '.', '_'
# and '-', starting with a letter or digit. No spaces, ',' or '|' (a backfill's key lists and multi-partition
# keys use them) and no '...' (the UI's key ranges: `a...b`).
SNAPSHOT_KEY = re.compile(r"[^\W_](?:[\w-]|\.(?!\.\.))*")
SNAPSHOT_RULE = "letters, digits, '.', '_' and '-' (starting with a letter or digit; no spaces, no '...')"


def crawl_snapshots(warc_root: str | os.PathLike[str] | None) -> list[str]:
    """The snapshot keys of a crawl root, sorted; the demo crawl (no root) is one snapshot, ``demo``.

    Raises FileNotFoundError for a missing root or one without WARC files, and ValueError for a layout
    that cannot be read unambiguously (loose WARC files beside snapshot folders, unusable folder names).
    """
    if warc_root is None:
        return [DEMO_SNAPSHOT]
    root = crawl_path(warc_root)
    if not root.is_dir():
        find_warc_files(root)  # the clear error: missing root, or a single file that is no WARC
        raise ValueError(f"crawl root must be a folder of WARC files or snapshot folders: {root}")
    entries = sorted(root.iterdir())
    folders = [p.name for p in entries if p.is_dir() and any(map(is_warc_file, p.rglob("*")))]
    if not folders:
        find_warc_files(root)  # raises when there are no WARC files at all
        folders = [root.name]
    elif loose := [p.name for p in entries if is_warc_file(p)]:
        raise ValueError(
            f"crawl root {root} holds snapshot folders and loose WARC files {loose[:3]}: "
            "move the files into a snapshot folder"
        )
    if bad := [name for name in folders if not SNAPSHOT_KEY.fullmatch(name)]:
        raise ValueError(
            f"crawl root {root}: snapshot folders {bad} cannot be snapshot keys (Dagster partition keys): "
            f"rename them to use {SNAPSHOT_RULE} only"
        )
    return folders


def snapshot_files(warc_root: str | os.PathLike[str], snapshot: str) -> list[Path | UPath]:
    """The WARC/ARC files of one snapshot of a crawl root."""
    root = crawl_path(warc_root)
    folder = root / snapshot
    if folder.is_dir():
        return find_warc_files(folder)
    if snapshot == root.name:  # a single-snapshot root
        return find_warc_files(root)
    raise FileNotFoundError(f"snapshot {snapshot!r} not found under crawl root {root}")


def crawl_fingerprint(warc_root: str | os.PathLike[str]) -> Any:
    """What the crawl's version depends on besides its config: the files of a single-snapshot root.

    A multi-snapshot root gives None: its snapshots are immutable partitions, and the set of snapshots
    versions only the stages that read all of them (``Experiment.versions``).
    """
    root = crawl_path(warc_root)
    try:
        snapshots = crawl_snapshots(root)
        if snapshots != [root.name] or (root / root.name).is_dir():
            return None
        return files_fingerprint(find_warc_files(root), root)
    except (FileNotFoundError, ValueError):
        return {"missing": str(root)}  # the crawl asset raises the clear error when it runs


def files_fingerprint(
    files: list[Path | UPath], root: Path | UPath | None = None
) -> list[tuple[str, int, int]]:
    """Name, size and modification time of each file: a change to any of them changes the version."""
    out = []
    for path in files:
        stat = path.stat()
        name = str(path.relative_to(root)) if root is not None else str(path)
        out.append((name, stat.st_size, int(stat.st_mtime)))
    return out
