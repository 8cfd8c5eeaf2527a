"""Versioned, atomic artifact directories: the Marin executor's output rule, on a folder or a bucket.

An artifact lives at ``{root}/{asset path}/{partition}/{version}/``; the root is a local folder or any
fsspec URL (``gs://bucket/prefix``). Its ``manifest.json`` is written last, after every other file, so a
folder with a manifest is complete and one without is never read. Same version -> same path -> reuse.

- On a local folder an artifact is written into a temporary sibling and renamed into place.
- On object storage (no rename) the files are staged on local disk, uploaded to the final folder, and
  the manifest goes up last; a leftover without a manifest is cleared before a rewrite.
- Work that must survive a failed attempt (a training run's checkpoints, written by a launched pod)
  goes into ``PendingArtifact.work``, a folder beside the output keyed by its version that is never
  cleared on failure: the next attempt resumes there. ``keep_work()`` makes its files part of the output.
- Readers get ``Artifact.path``, a local folder: the artifact itself on a local store, else a verified
  copy downloaded once into the cache (``MARIN_CACHE_DIR``). Launched children get ``Artifact.url``.
- A version is one output whatever step names it (a step's version does not hash its name): every write
  is indexed under ``_versions/{version}/``, and a step of another name and the same version gets an
  *alias*, a folder holding only a manifest with ``same_as``; reading it gives the original's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from marin_pipelines.lease import Lease, hold, lease_ttl

STORE_ROOT = "MARIN_STORE_ROOT"  # the variable naming the store root, passed on to every launched pod
MANIFEST = "manifest.json"
UNPARTITIONED = "_"
RECORDS = "_experiments"  # the experiments' execution records, under the root
VERSIONS = "_versions"  # version -> the asset holding its output, one file per partition (same_version)
SAME_AS = "same_as"  # an alias's manifest: {"asset": "a/b", "url": ...}, the output it stands for


def version_hash(payload: Any) -> str:
    """Short, stable hash of JSON-able config plus upstream versions."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def is_local(url: str | os.PathLike[str]) -> bool:
    return isinstance(fsspec.core.url_to_fs(str(url))[0], LocalFileSystem)


def default_store_root() -> str:
    """`.marin/store` under the working directory unless ``MARIN_STORE_ROOT`` says otherwise."""
    return os.environ.get(STORE_ROOT, str(Path.cwd() / ".marin" / "store"))


def cache_dir() -> Path:
    """Local disk for copies of remote artifacts, scratch work and compiled programs: ``MARIN_CACHE_DIR``,
    else the user's cache folder (``$XDG_CACHE_HOME``, else ~/.cache) under ``marin-pipelines``."""
    if os.environ.get("MARIN_CACHE_DIR"):
        return Path(os.environ["MARIN_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "marin-pipelines"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_entries(folder: Path) -> list[dict[str, Any]]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return [
        {"name": p.relative_to(folder).as_posix(), "bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in files
    ]


def partition_folder(partition: str | None) -> str:
    """The folder a partition's outputs live in: ``_`` for none; a multi-partition key's ``|`` as ``,``."""
    return partition.replace("|", ",") if partition else UNPARTITIONED


def read_url(url: str) -> str:
    """A whole text file at a local path or a URL."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs.cat_file(path).decode()


def write_url(url: str, data: str | bytes) -> None:
    """A whole file at a local path or a URL (its folder made where folders exist), replaced in one step: a
    reader (or a resumed run) finds the old file or the new one, never a part. An object upload is that
    already; a local file is written beside and renamed."""
    fs, path = fsspec.core.url_to_fs(url)
    folder, name = path.rsplit("/", 1)
    fs.makedirs(folder, exist_ok=True)
    data = data.encode() if isinstance(data, str) else data
    if not isinstance(fs, LocalFileSystem):
        fs.pipe_file(path, data)
        return
    partial = Path(folder) / f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial"
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def read_manifest(url: str) -> dict[str, Any] | None:
    """The manifest of the artifact at ``url``, or None while it is absent or incomplete."""
    fs, path = fsspec.core.url_to_fs(str(url))
    try:
        return json.loads(fs.cat_file(f"{path.rstrip('/')}/{MANIFEST}"))
    except FileNotFoundError:
        return None


def local_copy(url: str | os.PathLike[str], manifest: dict[str, Any] | None = None) -> Path:
    """A local folder holding the complete artifact at ``url``: the folder itself when it is local, else a
    copy in ``cache_dir()``, downloaded once (atomically, manifest last) and checked against the manifest's
    sizes and hashes. An artifact never changes after its manifest is written, so the copy never goes stale.
    """
    url = str(url)
    if is_local(url):
        return Path(fsspec.core.url_to_fs(url)[1])
    manifest = manifest or read_manifest(url)
    if manifest is None:
        raise FileNotFoundError(f"no complete artifact at {url} (no {MANIFEST})")
    local = cache_dir() / "store" / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24]
    if (local / MANIFEST).is_file():
        return local
    fs, root = fsspec.core.url_to_fs(url)
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{local.name}.", dir=local.parent))
    try:
        for entry in manifest["files"]:
            target = tmp / entry["name"]
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f"{root.rstrip('/')}/{entry['name']}", str(target))
            if target.stat().st_size != entry["bytes"] or entry.get("sha256") not in (None, _sha256(target)):
                raise OSError(f"{url}/{entry['name']} does not match its manifest (size or sha256)")
        (tmp / MANIFEST).write_text(json.dumps(manifest))
        try:
            os.replace(tmp, local)
        except OSError:  # another process finished the same copy first: keep theirs
            if not (local / MANIFEST).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return local


@dataclass
class Artifact:
    """A complete artifact: where it lives (``url``), and its manifest.

    Asked for under a step name whose output is an alias of another step's (same version), it is that
    other step's artifact (its url and manifest, so that every reader reads the one copy of the files), and
    ``asked_as`` is the asset path it was asked for under ("a/b"); None for a step's own output.
    """

    url: str
    manifest: dict[str, Any]
    asked_as: str | None = None

    @property
    def same_as(self) -> str | None:
        """The original's asset path when this was asked for under another name (an alias), else None."""
        return self.manifest["asset"] if self.asked_as is not None else None

    @property
    def path(self) -> Path:
        """A local folder to read it from (downloaded on first use when the store is remote)."""
        return local_copy(self.url, self.manifest)

    @property
    def metadata(self) -> dict[str, Any]:
        return self.manifest.get("metadata", {})

    @property
    def version(self) -> str:
        return self.manifest["version"]

    def file(self, name: str) -> Path:
        return self.path / name

    def read_bytes(self, name: str) -> bytes:
        """One file, read where it lives (no copy of the whole artifact)."""
        fs, root = fsspec.core.url_to_fs(self.url)
        return fs.cat_file(f"{root}/{name}")


@dataclass
class PendingArtifact:
    """An artifact being written: files go into ``path`` (local disk); ``metadata`` ends up in the manifest.

    ``work`` is the resumable work folder (a local path or URL, as the store's root) for what a launched
    child writes: it outlives a failed attempt, and with ``keep_work()`` its files become the output's.
    """

    path: Path
    partition: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    url: str = ""
    work: str = ""
    kept_work: bool = False

    def keep_work(self) -> None:
        self.kept_work = True


class ArtifactStore:
    """A root of versioned artifacts: a local folder or an fsspec URL."""

    def __init__(self, root: str | os.PathLike[str]):
        root = str(root) if "://" in str(root) else str(Path(root).expanduser())
        self.fs, base = fsspec.core.url_to_fs(root)
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = str(Path(base).expanduser().absolute()) if self.local else root.rstrip("/")
        self._base = self.root if self.local else base.rstrip("/")

    @property
    def fs_root(self) -> str:
        """The root as its file system names it (no scheme): for listing and walking it with ``fs``."""
        return self._base

    def url(self, asset_path: list[str], version: str, partition: str | None = None) -> str:
        return "/".join([self.root, *asset_path, partition_folder(partition), version])

    def work_url(self, asset_path: list[str], version: str, partition: str | None = None) -> str:
        """The resumable work folder of an output (``PendingArtifact.work``), beside it."""
        return self.url(asset_path, version, partition).rsplit("/", 1)[0] + f"/.{version}.work"

    def _fs_path(self, url: str) -> str:
        return url if self.local else self._base + url[len(self.root) :]

    def get(self, asset_path: list[str], version: str, partition: str | None = None) -> Artifact | None:
        """The complete artifact at this version, or None if absent or incomplete.

        An alias gives its original (``asked_as`` set), found by asset path under this root rather than by
        its recorded url, so that a copied or moved store reads its own copy; an alias whose original is
        gone is incomplete (None), and the step is built again."""
        url = self.url(asset_path, version, partition)
        manifest = read_manifest(url)
        if manifest is None or SAME_AS not in manifest:
            return Artifact(url, manifest) if manifest is not None else None
        original = self._original(manifest[SAME_AS]["asset"].split("/"), version, partition)
        if original is None:
            return None
        return Artifact(original.url, original.manifest, asked_as="/".join(asset_path))

    def _original(self, asset_path: list[str], version: str, partition: str | None) -> Artifact | None:
        """The complete output of this version at ``asset_path`` if it is one itself, not an alias (aliases
        never chain), and its manifest says this version."""
        url = self.url(asset_path, version, partition)
        manifest = read_manifest(url)
        if manifest is None or SAME_AS in manifest or manifest.get("version") != version:
            return None
        return Artifact(url, manifest)

    def same_version(self, version: str, partition: str | None = None) -> Artifact | None:
        """A complete output of ``version`` (and partition) under any asset path, never an alias: the one
        the version index names, else (a store written before the index, or an indexed output since
        deleted) one of the steps of that version that the execution records list."""
        for asset in chain(self._indexed(version, partition), self._recorded(version)):
            if (found := self._original(asset.split("/"), version, partition)) is not None:
                return found
        return None

    def _index_name(self, version: str, partition: str | None) -> str:
        return f"{VERSIONS}/{version}/{partition_folder(partition)}.json"

    def _indexed(self, version: str, partition: str | None) -> Iterator[str]:
        text = self.read_text(self._index_name(version, partition))
        if text is not None:
            yield json.loads(text)["asset"]

    def _recorded(self, version: str) -> Iterator[str]:
        """The names (and originals) the execution records give the steps of ``version``; read only when
        the index does not answer."""
        try:
            records = sorted(self.fs.glob(f"{self._base}/{RECORDS}/*.json"))
        except FileNotFoundError:
            return
        for record in records:
            try:
                steps = json.loads(self.fs.cat_file(record))["steps"]
            except (FileNotFoundError, ValueError, KeyError):  # gone meanwhile, or not a record
                continue
            for step in steps:
                if step.get("version") == version:
                    yield step["name"]
                    same_as = step.get(SAME_AS) or {}  # a partitioned step's: by partition
                    yield from same_as.values() if isinstance(same_as, dict) else [same_as]

    def others(self, asset_path: list[str], version: str, partition: str | None = None) -> list[Artifact]:
        """Complete artifacts of the same asset and partition at other versions, newest first; an alias
        counts as its original's artifact (the earlier version of this step was that output)."""
        folder = self._fs_path(self.url(asset_path, version, partition)).rsplit("/", 1)[0]
        try:
            names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in self.fs.ls(folder, detail=False)]
        except FileNotFoundError:
            names = []
        found = [
            artifact
            for name in names
            if name != version
            and not name.startswith(".")
            and (artifact := self.get(asset_path, name, partition)) is not None
        ]
        return sorted(found, key=lambda a: a.manifest.get("created", ""), reverse=True)

    @contextmanager
    def claim(
        self,
        asset_path: list[str],
        version: str,
        partition: str | None,
        owner: dict[str, Any],
        say: Callable[[str], None] = lambda message: None,
    ) -> Iterator[Lease | None]:
        """The lease of one version's output (``.{version}.lease`` beside it) for the block: one writer at
        a time, on a folder or a bucket. None when another run completed the output meanwhile: reuse it."""
        folder = self._fs_path(self.url(asset_path, version, partition)).rsplit("/", 1)[0]
        self.fs.makedirs(folder, exist_ok=True)
        complete = lambda: self.get(asset_path, version, partition) is not None  # noqa: E731
        with hold(self.fs, f"{folder}/.{version}.lease", complete, owner, lease_ttl(), say) as lease:
            if lease is not None and self.local:  # the only writer now: what killed writers left goes
                for stale in Path(folder).glob(f".{version}.tmp-*"):
                    shutil.rmtree(stale, ignore_errors=True)
            yield lease

    def read_text(self, relative: str) -> str | None:
        """A file under the root that is not an artifact (an execution record), or None if absent."""
        try:
            return self.fs.cat_file(f"{self._base}/{relative}").decode()
        except FileNotFoundError:
            return None

    def write_text(self, relative: str, text: str) -> str:
        """Replace a file under the root whole (a rename locally; one object upload on a bucket)."""
        url = f"{self._base}/{relative}"
        if self.local:
            path = Path(url)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
            tmp.write_text(text)
            os.replace(tmp, path)
        else:
            self.fs.pipe_file(url, text.encode())
        return f"{self.root}/{relative}"

    @contextmanager
    def write(
        self,
        asset_path: list[str],
        version: str,
        partition: str | None = None,
        config: Any = None,
        upstream: dict[str, str] | None = None,
        made_by: dict[str, str] | None = None,
        same_as: Artifact | None = None,
    ) -> Iterator[PendingArtifact]:
        """Write an artifact atomically; on any error the staged files are removed (``work`` is kept).

        ``config``, ``upstream`` (input -> step@version) and ``made_by`` (the run: its id) go into the
        manifest: what made this version, and who. A committed output is entered in the version index, so
        that a step of another name and the same version finds it (``same_version``); with ``same_as`` (that
        output) the artifact is an alias instead: no files, the original named in the manifest, and no
        index entry, so that the index names real outputs only and aliases never chain.
        """
        final = self.url(asset_path, version, partition)
        work = self.work_url(asset_path, version, partition)
        if self.local:
            tmp = Path(f"{final.rsplit('/', 1)[0]}/.{version}.tmp-{uuid.uuid4().hex[:8]}")
            tmp.mkdir(parents=True)
        else:
            tmp = _staging(version)
        pending = PendingArtifact(tmp, partition, url=final, work=work)
        started = time.time()
        try:
            yield pending
            manifest = {
                "asset": "/".join(asset_path),
                "partition": partition,
                "version": version,
                "config": config,
                "upstream": upstream or {},
                "made_by": made_by or {},
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "wall_seconds": round(time.time() - started, 3),
                "files": [],
                "metadata": pending.metadata,
            }
            if same_as is not None:
                manifest[SAME_AS] = {"asset": same_as.manifest["asset"], "url": same_as.url}
            if self.local:
                self._commit_local(pending, manifest, Path(final))
            else:
                self._commit_remote(pending, manifest, final)
            if same_as is None:
                entry = {"asset": manifest["asset"], "url": final}
                self.write_text(self._index_name(version, partition), json.dumps(entry))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.with_name(tmp.name + OWNER).unlink(missing_ok=True)

    def _commit_local(self, pending: PendingArtifact, manifest: dict[str, Any], final: Path) -> None:
        work = Path(pending.work)
        if pending.kept_work and work.is_dir():
            for entry in work.iterdir():  # same file system: renames, nothing copied
                os.replace(entry, pending.path / entry.name)
        manifest["files"] = _file_entries(pending.path)
        (pending.path / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
        if final.exists():  # an incomplete leftover of a killed run: never trusted, replaced
            shutil.rmtree(final)
        os.replace(pending.path, final)
        shutil.rmtree(work, ignore_errors=True)

    def _commit_remote(self, pending: PendingArtifact, manifest: dict[str, Any], final: str) -> None:
        fs, target, work = self.fs, self._fs_path(final), self._fs_path(pending.work)
        if fs.exists(target):  # an incomplete leftover of a killed run: never trusted, replaced
            fs.rm(target, recursive=True)
        staged = _file_entries(pending.path)
        for entry in staged:
            fs.put_file(str(pending.path / entry["name"]), f"{target}/{entry['name']}")
        kept = []
        if pending.kept_work and fs.exists(work):
            for name in sorted(fs.find(work)):  # server-side copies within the bucket
                relative = name[len(work) + 1 :]
                fs.copy(name, f"{target}/{relative}")
                info = fs.info(name)
                kept.append({"name": relative, "bytes": info["size"], "checksum": _checksum(info)})
        manifest["files"] = sorted(staged + kept, key=lambda e: e["name"])
        fs.pipe_file(f"{target}/{MANIFEST}", json.dumps(manifest, indent=2, default=str).encode())  # last
        if fs.exists(work):
            fs.rm(work, recursive=True)


def _checksum(info: dict[str, Any]) -> str | None:
    """The object store's own checksum of a file (hashing would mean downloading it)."""
    for key in ("crc32c", "md5Hash", "ETag", "etag"):
        if info.get(key):
            return f"{key}:{info[key]}"
    return None


OWNER = ".owner"  # beside a staging folder: "host pid" of the process writing it
UNOWNED_DAYS = 7  # a staging folder from before owners were recorded is swept after this


def _scratch() -> Path:
    folder = cache_dir() / "staging"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _staging(version: str) -> Path:
    """A new local folder to stage an artifact for a bucket in, its owner recorded beside it; the folders
    of writers that died on this machine (killed: their ``finally`` never ran) are removed first."""
    scratch = _scratch()
    _sweep_staging(scratch)
    tmp = Path(tempfile.mkdtemp(prefix=f"{version}.", dir=scratch))
    tmp.with_name(tmp.name + OWNER).write_text(f"{socket.gethostname()} {os.getpid()}")
    return tmp


def _sweep_staging(scratch: Path) -> None:
    """Remove the staging folders whose writer is gone: its process is dead on this host, or (no owner
    recorded) the folder is older than UNOWNED_DAYS. Another host's folder in a shared cache is left."""
    host = socket.gethostname()
    for folder in (p for p in scratch.iterdir() if p.is_dir()):
        owner = folder.with_name(folder.name + OWNER)
        try:
            if owner.exists():
                owner_host, pid = owner.read_text().split()
                dead = owner_host == host and not _alive(int(pid))
            else:
                dead = time.time() - folder.stat().st_mtime > UNOWNED_DAYS * 86400
        except (OSError, ValueError):  # another sweeper got there first, or a torn marker: next time
            continue
        if dead:
            shutil.rmtree(folder, ignore_errors=True)
            owner.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
