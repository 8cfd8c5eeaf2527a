"""Which worker trains which trial: a trial's folder has the lease that ``marin-pipelines train`` takes on its
output (``lease.hold_output``), held while the trial trains; the study is asked for trials under a short lock.

Under the lock a worker either takes over a trial that no live worker holds (RUNNING in the study, its lease
absent, left by a process of this host that has ended, or silent for the lease's ttl: its worker was killed),
which it then resumes from the trial's last checkpoint, or asks the study for a new trial and takes its lease
before letting go of the lock. No two workers hold one trial's lease, so none trains a trial twice at once.

Resumed, not failed and retried: a trial is a run like any other, its checkpoints resume bit for bit, and its
parameters are the study's; a retry would train the same point again from step 0 under another number.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import fsspec
from optuna.trial import FrozenTrial, TrialState

from marin_pipelines.lease import (
    Lease,
    create_new,
    ended_here,
    hold,
    lease_ttl,
    output_lease,
    read_lease,
    take_over,
    this_process,
)

TRIALS_DIR = "trials"
ASK_LEASE = ".ask.lease"
ASK_POLL = 0.05  # seconds between looks at the ask lock: held for moments


def trial_folder(out: str, number: int) -> str:
    """The run folder of trial ``number``."""
    return f"{out.rstrip('/')}/{TRIALS_DIR}/{number:04d}"


@contextmanager
def asking(out: str) -> Iterator[None]:
    """The sweep's lock for the block: one worker at a time counts, claims and asks for trials."""
    fs, path = fsspec.core.url_to_fs(f"{out.rstrip('/')}/{ASK_LEASE}")
    with hold(fs, path, lambda: False, this_process(command="sweep"), lease_ttl(), poll=ASK_POLL):
        yield


class Claims:
    """One worker's claims on trials, and what it has seen of the leases of the trials others hold."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.ttl = lease_ttl()
        self.seen: dict[str, tuple[Any, Any, float]] = {}  # lease path -> (token, beat, first seen)

    def new(self, number: int) -> Lease:
        """The lease of a trial just asked for (under the lock: nobody else can hold it)."""
        fs, path = output_lease(trial_folder(self.out, number))
        mine = Lease(fs, path, self._owner(number), self.ttl)
        if not create_new(fs, path, mine.record()):
            raise RuntimeError(
                f"{path}: the lease of a new trial is held already (a folder of another sweep?)"
            )
        return mine.start()

    def orphan(self, trials: list[FrozenTrial]) -> tuple[FrozenTrial, Lease] | None:
        """A running trial that no live worker holds, with its lease now this worker's; None if none."""
        for trial in trials:
            if trial.state == TrialState.RUNNING and (lease := self._take(trial.number)) is not None:
                return trial, lease.start()
        return None

    def take(self, number: int) -> Lease | None:
        """Trial ``number``'s lease, now this worker's, where no live worker holds it; else None."""
        lease = self._take(number)
        return lease.start() if lease is not None else None

    def _take(self, number: int) -> Lease | None:
        fs, path = output_lease(trial_folder(self.out, number))
        mine = Lease(fs, path, self._owner(number), self.ttl)
        current = read_lease(fs, path)
        if current is None:  # asked by a worker killed before it took the lease
            return mine if create_new(fs, path, mine.record()) else None
        state, now = (current.get("token"), current.get("beat")), time.monotonic()
        if path not in self.seen or self.seen[path][:2] != state:  # moved: silent from now on, if at all
            self.seen[path] = (*state, now)
        silent = now - self.seen[path][2] > self.ttl
        if (silent or ended_here(current.get("owner", {}))) and take_over(fs, path, str(state[0]), mine):
            return mine
        return None

    @staticmethod
    def _owner(number: int) -> dict[str, Any]:
        return this_process(command="sweep", trial=str(number))
