"""One writer per step version: a lease beside the output, created only where none exists and renewed
while its holder works (a heartbeat). Other runs wait for the output and reuse it; a lease whose heartbeat
has stopped for ``ttl`` seconds (a killed process, a lost node) is taken over by exactly one of them, at once
when the holder was a process of this host that no longer exists.

The store only has to create a file where none exists: ``link`` on a file system, ``ifGenerationMatch=0``
on Cloud Storage. Staleness is judged on the waiter's own clock (the holder's heartbeat count has not moved
for ``ttl`` seconds), so hosts need not agree on the time. A takeover first creates a marker named by the
stale holder's token: of several waiters, only the one that creates it takes over.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

LEASE_SECONDS = "MARIN_LEASE_SECONDS"
DEFAULT_TTL = 60.0


class LeaseLost(RuntimeError):
    """Another run took the lease over (this one's heartbeat stopped for longer than the lease lasts)."""


def lease_ttl() -> float:
    """Seconds without a heartbeat after which a lease is taken over: ``MARIN_LEASE_SECONDS`` or 60."""
    value = os.environ.get(LEASE_SECONDS, str(DEFAULT_TTL))
    try:
        ttl = float(value)
    except ValueError:
        ttl = 0.0
    if ttl <= 0:
        raise ValueError(f"{LEASE_SECONDS}={value!r} must be a positive number of seconds")
    return ttl


def create_new(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Write ``data`` at ``path`` only if nothing is there (atomically); False if something is."""
    if isinstance(fs, LocalFileSystem):
        staged = f"{path}.{uuid.uuid4().hex}"
        Path(staged).write_bytes(data)
        try:
            os.link(staged, path)  # fails where the name exists: create-if-absent with the content in place
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(staged)
    try:
        fs.pipe_file(path, data, mode="create")  # gcsfs: ifGenerationMatch=0
        return True
    except FileExistsError:
        return False
    except TypeError as error:
        raise NotImplementedError(f"{fs.protocol} cannot create a file only where none exists") from error


def replace(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    """Overwrite ``path`` whole: readers see the old or the new content, never a part."""
    if isinstance(fs, LocalFileSystem):
        staged = f"{path}.{uuid.uuid4().hex}"
        Path(staged).write_bytes(data)
        os.replace(staged, path)
    else:
        fs.pipe_file(path, data)


@dataclass
class Lease:
    """A held lease: renewed by a thread until ``release``; ``check`` raises if another run took it."""

    fs: AbstractFileSystem
    path: str
    owner: dict[str, Any]
    ttl: float
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    lost_to: dict[str, Any] | None = None
    _beat: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def record(self) -> bytes:
        return json.dumps({"token": self.token, "beat": self._beat, "owner": self.owner}).encode()

    def start(self) -> Lease:
        threading.Thread(target=self._heartbeat, name=f"lease {self.path}", daemon=True).start()
        return self

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                current = read_lease(self.fs, self.path)
            except OSError:  # a passing store error: the next beat looks again, well within the ttl
                continue
            if current is None or current.get("token") != self.token:
                self.lost_to = (current or {}).get("owner", {"released": True})
                return
            self._beat += 1
            try:
                replace(self.fs, self.path, self.record())
            except OSError:  # a passing store error: the next beat tries again, well within the ttl
                continue

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease is still this one's (read now: the heartbeat thread may not
        have run since this process was paused)."""
        current = read_lease(self.fs, self.path)
        if current is None or current.get("token") != self.token:
            self.lost_to = (current or {}).get("owner", {"released": True})
        if self.lost_to is not None:
            raise LeaseLost(
                f"{self.path}: another run took this step over ({describe(self.lost_to)}) after this one "
                f"sent no heartbeat for {self.ttl:g} s; its output is discarded"
            )

    def release(self) -> None:
        """Stop the heartbeat; remove the lease (if still this one's) and the takeover markers beside it."""
        self._stop.set()
        current = read_lease(self.fs, self.path)
        if current is not None and current.get("token") == self.token:
            self.fs.rm_file(self.path)
            clear_markers(self.fs, self.path)


def read_lease(fs: AbstractFileSystem, path: str) -> dict[str, Any] | None:
    """The lease's record, None where there is none (or it is being replaced)."""
    try:
        return json.loads(fs.cat_file(path))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def ended_here(owner: dict[str, Any]) -> bool:
    """The holder ran on this host and its process is gone (killed): no need to wait out its lease."""
    if owner.get("host") != socket.gethostname():
        return False
    try:
        pid = int(owner["pid"])
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, ValueError, TypeError):
        return False
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """Dead but not yet reaped (Linux: state Z), as a killed launcher's child is until it is waited for."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def describe(owner: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in owner.items()) or "unknown"


def this_process(**more: str) -> dict[str, Any]:
    """Who holds a lease, for the runs that wait on it: host, pid and the run (never the environment)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), **more}


@contextmanager
def hold(
    fs: AbstractFileSystem,
    path: str,
    done: Callable[[], bool],
    owner: dict[str, Any],
    ttl: float,
    say: Callable[[str], None] = lambda message: None,
    poll: float | None = None,
) -> Iterator[Lease | None]:
    """The lease at ``path`` for the block, or None once ``done()`` (another run finished the work).

    Waits while another run holds it, polling a few times per ``ttl`` (or every ``poll`` seconds: a lease
    held for moments); takes it over when its heartbeat has not moved for ``ttl`` seconds. Released at the
    end of the block, whatever happened in it.
    """
    poll = min(5.0, ttl / 4) if poll is None else poll
    seen: tuple[str, int] | None = None
    since = time.monotonic()
    lease: Lease | None = None
    while lease is None:
        if done():
            yield None
            return
        mine = Lease(fs, path, owner, ttl)
        if create_new(fs, path, mine.record()):
            lease = mine
            break
        current = read_lease(fs, path)
        if current is None:  # released, or being replaced, in between: look again
            continue
        state, holder = (current.get("token", ""), current.get("beat", 0)), current.get("owner", {})
        if state != seen:
            if seen is None or state[0] != seen[0]:
                say(f"waiting for the run building it ({describe(holder)})")
            seen, since = state, time.monotonic()
        silent, gone = time.monotonic() - since > ttl, ended_here(holder)
        if (silent or gone) and take_over(fs, path, state[0], mine):
            why = "ended without releasing it" if gone else f"silent for {ttl:g} s"
            say(f"took over from a run {why} ({describe(holder)})")
            lease = mine
            break
        time.sleep(poll)
    lease.start()
    try:
        if done():  # finished by the run this one waited for, just before the lease changed hands
            yield None
        else:
            yield lease
    finally:
        lease.release()


def take_over(fs: AbstractFileSystem, path: str, stale: str, mine: Lease) -> bool:
    """Replace the lease of token ``stale`` by ``mine``, if this process is the one that gets to."""
    if not create_new(fs, f"{path}.{stale}", mine.record()):
        return False  # another waiter is taking it over
    current = read_lease(fs, path)
    if current is None or current.get("token") != stale:
        return False  # taken over already, or released: go round again
    replace(fs, path, mine.record())
    return True


def clear_markers(fs: AbstractFileSystem, path: str) -> None:
    """The takeover markers of a finished step's lease."""
    folder, name = path.rsplit("/", 1)
    try:
        entries = fs.ls(folder, detail=False)
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.rstrip("/").rsplit("/", 1)[-1].startswith(f"{name}."):
            fs.rm_file(entry)


@contextmanager
def hold_output(url: str, command: str, say: Callable[[str], None]) -> Iterator[Lease]:
    """The lease of a command's output (a run folder, a cache, a results file) for the block: the same lease
    a step takes on its version, beside the output (``.NAME.lease``), so that a second command writing there
    waits for the first (then resumes or reuses what it finished) instead of writing beside it."""
    fs, lease_path = output_lease(url)
    with hold(fs, lease_path, lambda: False, this_process(command=command), lease_ttl(), say) as lease:
        assert lease is not None  # never done before it starts: a command always does its work
        yield lease


def output_lease(url: str) -> tuple[AbstractFileSystem, str]:
    """Where the lease of the output ``url`` lives (``.NAME.lease`` beside it; its folder made)."""
    fs, path = fsspec.core.url_to_fs(url)
    folder, _, name = path.rstrip("/").rpartition("/")
    fs.makedirs(folder or ".", exist_ok=True)
    return fs, f"{folder}/.{name}.lease" if folder else f".{name}.lease"
