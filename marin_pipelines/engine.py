"""The engine seam: one task mapped over units of work (WARC files, document shards, hash partitions), on a
local process pool (the laptop default) or a Ray cluster. Same task, same units, same bytes either way.

``map_units`` makes the work restartable. Each unit writes its files into local scratch, publishes them
into the step's work folder (a local folder or a bucket prefix: ``PendingArtifact.work``, which every
machine of the engine reaches), and then, last, its done record ``_done/{unit:05d}.json`` with its result.
A unit without a done record is never trusted: it is done again, with the same file names and bytes, so a
rerun after a crash, a lost driver, worker or node does only the missing units, and a zombie attempt racing
its retry is harmless. The driver holds no state that matters, as the lost-driver advice for Ray asks.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from marin_pipelines.cpu_limit import available_cpus
from marin_pipelines.orphans import die_with_parent

T = TypeVar("T")
R = TypeVar("R")
Progress = Callable[[int, int], None]  # (units done, units in all)
DONE = "_done"
ENGINES = ("local", "ray")


class Engine(Protocol):
    """Runs ``fn`` over ``items``; results come back in item order. ``fn`` must be picklable (a module-level
    function or a ``partial`` of one) and must not depend on which process runs it."""

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: Progress | None = None) -> list[R]: ...

    def session(self) -> AbstractContextManager[Engine]:
        """The same engine for several maps in a row (a stage of several steps): its workers, or its
        connection, start once for all of them."""
        ...


@dataclass(frozen=True)
class LocalEngine:
    """A process pool on this machine. Forked workers start in milliseconds with the stage's modules
    imported; ``start_method="spawn"`` is for a parent whose threads a fork would copy half-way (the
    tokenizer's). One worker, or one item, runs in this process."""

    workers: int = field(default_factory=available_cpus)
    start_method: Literal["fork", "spawn"] = "fork"

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: Progress | None = None) -> list[R]:
        if self.workers <= 1 or len(items) <= 1:
            return _in_order(map(fn, items), len(items), progress)
        with self._pool(len(items)) as pool:
            return _in_order(pool.map(fn, items), len(items), progress)

    @contextmanager
    def session(self) -> Iterator[Engine]:
        if self.workers <= 1:
            yield self
            return
        with self._pool(self.workers) as pool:
            yield _Pooled(pool)

    def _pool(self, size: int) -> ProcessPoolExecutor:
        context = multiprocessing.get_context(self.start_method)
        # a worker dies with this process: a killed run leaves no worker writing into its work folder
        return ProcessPoolExecutor(
            min(self.workers, size), mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),)
        )


@dataclass(frozen=True)
class _Pooled:
    """A ``LocalEngine`` session: maps share one pool (forking workers costs tens of ms per map)."""

    pool: ProcessPoolExecutor

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: Progress | None = None) -> list[R]:
        results = map(fn, items) if len(items) <= 1 else self.pool.map(fn, items)
        return _in_order(results, len(items), progress)

    @contextmanager
    def session(self) -> Iterator[Engine]:
        yield self


def _in_order(results: Iterator[R], total: int, progress: Progress | None) -> list[R]:
    done: list[R] = []
    for result in results:
        done.append(result)
        if progress:
            progress(len(done), total)
    return done


@dataclass(frozen=True)
class RayEngine:
    """Tasks on a Ray cluster: the one this process is already connected to (dagster-ray's resources
    connect it), else ``address`` (``host:port`` of a running cluster's GCS, or ``ray://``), else
    ``RAY_ADDRESS``, else a cluster started here for the map. Ray retries a task whose worker or node is
    lost (``max_retries``); an exception raised by the task itself is not retried and reaches the caller
    as that exception. The cluster's workers must run this project at the same version (same image)."""

    address: str | None = None
    max_retries: int = 3
    cpus_per_task: float = 1

    def map(self, fn: Callable[[T], R], items: Sequence[T], progress: Progress | None = None) -> list[R]:
        import ray

        report = progress or (lambda done, total: None)
        if not items:
            return []
        with self.session():
            task = ray.remote(_call).options(max_retries=self.max_retries, num_cpus=self.cpus_per_task)
            fn_ref = ray.put(fn)  # shipped once, not once per item
            index = {task.remote(fn_ref, item): i for i, item in enumerate(items)}
            results: list[Any] = [None] * len(items)
            pending, done = list(index), 0
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                results[index[ready[0]]] = ray.get(ready[0])
                done += 1
                report(done, len(items))
            return results

    @contextmanager
    def session(self) -> Iterator[Engine]:
        """Connected for the block: to the cluster, unless this process is already (then left so)."""
        import ray  # here: the local default and the command line's --help never pay for it

        if ray.is_initialized():
            yield self
            return
        ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        try:
            yield self
        finally:
            ray.shutdown()


def _call(fn: Callable[[T], R], item: T) -> R:
    """Ray's remote decorator takes functions only, not a ``partial``: the partial travels as an argument."""
    return fn(item)


def make_engine(name: str = "local", ray_address: str | None = None, workers: int | None = None) -> Engine:
    """The engine named on a command line: ``local`` (``workers`` processes) or ``ray``."""
    if name == "local":
        if ray_address:
            raise ValueError("--ray-address is for --engine ray")
        return LocalEngine(workers) if workers is not None else LocalEngine()
    if name == "ray":
        return RayEngine(ray_address or None)
    raise ValueError(f"--engine {name!r}: choose one of {', '.join(ENGINES)}")


def map_units(
    engine: Engine,
    task: Callable[[int, Any, Path], Any],
    inputs: Sequence[Any],
    work: str,
    progress: Progress | None = None,
) -> list[Any]:
    """``task(unit, input, folder)`` for every input that has no done record in ``work``; returns every
    unit's result (JSON), in input order, from the done records.

    The task writes its files into ``folder`` (local scratch; names must carry the unit so that units never
    collide) and returns a JSON-able result. ``work`` is a local folder or a URL that every machine of the
    engine can write. ``finish_units(work)`` clears the done records once the results are kept elsewhere.
    """
    report = progress or (lambda done, total: None)
    records = read_done(work)
    todo = [(unit, item) for unit, item in enumerate(inputs) if unit not in records]
    before = len(inputs) - len(todo)
    report(before, len(inputs))
    results = engine.map(
        partial(_run_unit, task, work), todo, lambda done, _: report(before + done, len(inputs))
    )
    records.update((unit, record) for (unit, _), record in zip(todo, results, strict=True))
    return [records[unit]["result"] for unit in range(len(inputs))]


def read_done(work: str) -> dict[int, dict[str, Any]]:
    """The done records in ``work`` whose files are all there (a record is written after its files).

    Only ``_done/`` and the folders its records name are listed: a work folder may hold much else (a
    dedup's shuffle), and on a bucket each listing is a request."""
    fs, root = fsspec.core.url_to_fs(work)
    root = root.rstrip("/")
    try:
        names = fs.ls(f"{root}/{DONE}", detail=False)
    except FileNotFoundError:
        return {}
    records = [json.loads(fs.cat_file(name)) for name in sorted(names) if name.endswith(".json")]
    sizes: dict[str, int] = {}
    for folder in {f"{root}/{f['name']}".rsplit("/", 1)[0] for record in records for f in record["files"]}:
        with contextlib.suppress(FileNotFoundError):
            sizes.update((info["name"].rstrip("/"), info["size"]) for info in fs.ls(folder, detail=True))
    return {
        record["unit"]: record
        for record in records
        if all(sizes.get(f"{root}/{f['name']}") == f["bytes"] for f in record["files"])
    }


def finish_units(work: str) -> None:
    """Remove the done records and any scratch left in ``work``: what remains are the units' files."""
    fs, root = fsspec.core.url_to_fs(work)
    root = root.rstrip("/")
    if fs.exists(f"{root}/{DONE}"):
        fs.rm(f"{root}/{DONE}", recursive=True)
    if isinstance(fs, LocalFileSystem) and Path(root).is_dir():
        for scratch in Path(root).glob(".unit-*"):
            shutil.rmtree(scratch, ignore_errors=True)


def _run_unit(
    task: Callable[[int, Any, Path], Any], work: str, unit_input: tuple[int, Any]
) -> dict[str, Any]:
    unit, item = unit_input
    started = time.time()
    fs, root = fsspec.core.url_to_fs(work)
    root = root.rstrip("/")
    local = isinstance(fs, LocalFileSystem)
    if local:  # scratch beside the work folder: publishing is a rename
        Path(root).mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".unit-{unit:05d}.", dir=root))
    else:
        scratch = Path(tempfile.mkdtemp(prefix=f"unit-{unit:05d}."))
    try:
        result = task(unit, item, scratch)
        files = sorted(p for p in scratch.rglob("*") if p.is_file())
        entries = [{"name": p.relative_to(scratch).as_posix(), "bytes": p.stat().st_size} for p in files]
        for path, entry in zip(files, entries, strict=True):
            target = f"{root}/{entry['name']}"
            if local:
                _folder(Path(target).parent)
                os.replace(path, target)
            else:
                fs.put_file(str(path), target)
        record = {
            "unit": unit,
            "files": entries,
            "result": result,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "seconds": round(time.time() - started, 3),
        }
        blob = json.dumps(record).encode()
        done = f"{root}/{DONE}/{unit:05d}.json"
        if local:  # last, and atomically: a half-written record is never read
            _folder(Path(done).parent)
            tmp = Path(f"{done}.tmp-{uuid.uuid4().hex[:8]}")
            tmp.write_bytes(blob)
            os.replace(tmp, done)
        else:
            fs.pipe_file(done, blob)  # one object upload: whole or absent
        return record
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _folder(path: Path) -> None:
    """Make ``path`` if it is not there (a stat is cheaper than a failing mkdir on some file systems)."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
