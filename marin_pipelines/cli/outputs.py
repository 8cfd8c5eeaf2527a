"""A command's output checked before its work: a run folder that is a file, a results file that is a
folder, a place that cannot be written (read-only, no permission, a full disk) is one line naming the
path, not a traceback after an hour of work. Remote outputs (``gs://``, any ``scheme://``) are checked by
their first write.

Also the lease a command takes on its output (``lease.hold_output``), so that two commands writing one
place wait for each other as two runs of a step do."""

from __future__ import annotations

import errno
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class OutputError(ValueError):
    """An output path that cannot be used as asked."""


def check_folder(url: str, flag: str = "--out") -> None:
    """``url`` can hold a run's files: a folder (made where missing) that takes a file."""
    if "://" in url:
        return
    path = Path(url)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {url} is a file; give a folder for the run")
    _make(path, flag, url)
    _probe(path, flag, url)


def check_file(url: str, flag: str = "--out") -> None:
    """``url`` can be written as one file: not a folder, in a folder (made where missing) that takes files."""
    if "://" in url:
        return
    path = Path(url)
    if path.is_dir():
        raise OutputError(f"{flag} {url} is a folder; give the path of the file to write")
    _make(path.parent, flag, url)
    _probe(path.parent, flag, url)


def _make(folder: Path, flag: str, url: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file on the way
        raise OutputError(f"{flag} {url}: a part of the path is a file, not a folder") from None
    except OSError as e:
        raise OutputError(f"{flag} {url}: cannot make {folder}: {describe_os_error(e)}") from None


def _probe(folder: Path, flag: str, url: str) -> None:
    probe = folder / f".write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        probe.write_bytes(b"\0" * 4096)
    except OSError as e:
        raise OutputError(f"{flag} {url}: cannot write in {folder}: {describe_os_error(e)}") from None
    finally:
        probe.unlink(missing_ok=True)


NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def os_error_in(error: BaseException) -> OSError | None:
    """The disk error (no space, read-only, no permission) that caused ``error``, following its causes
    and the text of wrappers that keep only the message (a checkpoint library's)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (*NO_SPACE, errno.EROFS, errno.EACCES, errno.EPERM):
            return seen
        seen = seen.__cause__ or seen.__context__
    text = str(error)
    for number in (*NO_SPACE, errno.EROFS):
        if os.strerror(number) in text:
            return OSError(number, os.strerror(number))
    return None


def describe_os_error(error: OSError) -> str:
    """What went wrong, in words, without the path (the caller names it)."""
    if error.errno in NO_SPACE:
        return "no space left (the disk, a quota or the file size limit is full)"
    if error.errno in (errno.EROFS,):
        return "read-only file system"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "not allowed to write there"
    return error.strerror or str(error)


@contextmanager
def naming(path: str) -> Iterator[None]:
    """An OSError without a path raised in the block (a write deep in a worker, a full disk) names ``path``:
    the command's output, where it was writing."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror, path) from e
        raise


@contextmanager
def held(url: str, command: str) -> Iterator[None]:
    """The output's lease for the block (``lease.hold_output``), waiting for another command that holds
    it; what it waits for is said on stderr."""
    from marin_pipelines.lease import hold_output

    def say(message: str) -> None:
        print(f"marin-pipelines {command}: {url}: {message}", file=sys.stderr, flush=True)

    with hold_output(url, command, say):
        yield


@contextmanager
def new_folder(out: str, command: str, key: Any) -> Iterator[str]:
    """Build the new folder ``out`` (or an empty one: the rename replaces it) through a work folder beside
    it named by ``key`` (the command's config and the identity of its inputs): a killed run, started again
    with the same flags and inputs, resumes there, and other flags or inputs never reuse it; ``out`` appears
    whole, by a rename, or not at all. A run refused for its input (a ValueError: a field mapping that
    matches nothing, a damaged file) leaves no work folder behind: run again with the same flags and inputs
    it would be refused again."""
    from marin_pipelines.store import version_hash

    if "://" in out:
        raise OutputError(f"--out {out}: give a local folder (the output appears by a rename)")
    path = Path(out)
    if _taken(path):
        raise OutputError(f"--out {out} already exists and is no empty folder; give a new or empty folder")
    check_folder(str(path.parent), "--out")
    work = path.with_name(f".{path.name}.work-{version_hash(key)}")
    with held(out, command):  # two commands never build into one work folder
        if _taken(path):
            raise OutputError(f"--out {out} was made meanwhile by another command; give a new folder")
        with naming(out):
            try:
                yield str(work)
            except ValueError:  # bad input or flags: the same ones fail again, so there is nothing to resume
                shutil.rmtree(work, ignore_errors=True)
                raise
            work.mkdir(exist_ok=True)  # nothing written (no document): still a folder
            os.replace(work, path)


def _taken(path: Path) -> bool:
    """Something is at ``path`` that a rename onto it would replace: a file, or a folder with entries."""
    return path.is_symlink() or path.exists() and (not path.is_dir() or any(path.iterdir()))
