"""No orphan keeps writing: a worker or a launched child is killed when the process that started it dies.

A SIGKILL of ``experiment``, ``process-crawl`` or ``tokenize`` would otherwise leave its pool workers or its
training child running, and the rerun that takes the step's lease over would compute beside a process still
writing the same work folder. Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``) does it in the kernel,
whatever killed the parent; elsewhere this is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT = "MARIN_PARENT_PID"  # set by a launcher for its child: the process whose death ends the child


def die_with_parent(parent: int | None = None) -> None:
    """Be SIGKILLed when the parent dies; exit at once if ``parent`` (its pid) is already gone."""
    if sys.platform != "linux":
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:  # it died before the signal was asked for
        os._exit(1)


def die_with_launcher() -> None:
    """In a launched child (``PARENT`` set): die with the launcher. The variable is removed, so that the
    child's own children are not held to a process that is not their parent."""
    parent = os.environ.pop(PARENT, None)
    if parent:
        die_with_parent(int(parent))


def launched_env() -> dict[str, str]:
    """What a launcher puts into its child's environment so that the child dies with it."""
    return {PARENT: str(os.getpid())}
