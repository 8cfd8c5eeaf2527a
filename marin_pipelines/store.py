"""Versioned, atomic artifact directories: the Marin executor's output rule.

An artifact lives at ``{root}/{asset path}/{partition}/{version}/``. It is written into a
temporary sibling and renamed into place with its ``manifest.json`` written last, so a directory
with a manifest is complete and one without is never read. Same version -> same path -> reuse.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
UNPARTITIONED = "_"


def version_hash(payload: Any) -> str:
    """Short, stable hash of JSON-able config plus upstream versions."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Artifact:
    """A complete artifact: its directory and its manifest."""

    path: Path
    manifest: dict[str, Any]

    @property
    def metadata(self) -> dict[str, Any]:
        return self.manifest.get("metadata", {})

    @property
    def version(self) -> str:
        return self.manifest["version"]

    def file(self, name: str) -> Path:
        return self.path / name


@dataclass
class PendingArtifact:
    """An artifact being written: files go into ``path``; ``metadata`` ends up in the manifest."""

    path: Path
    partition: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class ArtifactStore:
    """A root folder of versioned artifacts."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).expanduser()

    def path(self, asset_path: list[str], version: str, partition: str | None = None) -> Path:
        folder = partition.replace("|", ",") if partition else UNPARTITIONED  # multi-partition keys
        return self.root.joinpath(*asset_path, folder, version)

    def get(self, asset_path: list[str], version: str, partition: str | None = None) -> Artifact | None:
        """The complete artifact at this version, or None if absent or incomplete."""
        path = self.path(asset_path, version, partition)
        manifest = path / MANIFEST
        if not manifest.is_file():
            return None
        return Artifact(path, json.loads(manifest.read_text()))

    def others(self, asset_path: list[str], version: str, partition: str | None = None) -> list[Artifact]:
        """Complete artifacts of the same asset and partition at other versions, newest first."""
        folder = self.path(asset_path, version, partition).parent
        found = [
            artifact
            for path in (folder.iterdir() if folder.is_dir() else [])
            if path.name != version
            and not path.name.startswith(".")
            and (artifact := self.get(asset_path, path.name, partition)) is not None
        ]
        return sorted(found, key=lambda a: a.manifest.get("created", ""), reverse=True)

    @contextmanager
    def write(
        self,
        asset_path: list[str],
        version: str,
        partition: str | None = None,
        config: Any = None,
        upstream: dict[str, str] | None = None,
        made_by: dict[str, str] | None = None,
    ) -> Iterator[PendingArtifact]:
        """Write an artifact atomically; on any error the temporary directory is removed.

        ``config``, ``upstream`` (input -> step@version) and ``made_by`` (the run: its id) go into the
        manifest: what made this version, and who.
        """
        final = self.path(asset_path, version, partition)
        tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
        tmp.mkdir(parents=True)
        pending = PendingArtifact(tmp, partition)
        started = time.time()
        try:
            yield pending
            files = sorted(p for p in tmp.rglob("*") if p.is_file())
            manifest = {
                "asset": "/".join(asset_path),
                "partition": partition,
                "version": version,
                "config": config,
                "upstream": upstream or {},
                "made_by": made_by or {},
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "wall_seconds": round(time.time() - started, 3),
                "files": [
                    {"name": str(p.relative_to(tmp)), "bytes": p.stat().st_size, "sha256": _sha256(p)}
                    for p in files
                ],
                "metadata": pending.metadata,
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
            if final.exists():  # an incomplete leftover of a killed run: never trusted, replaced
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
