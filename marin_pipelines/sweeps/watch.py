"""A sweep's trials as another process trains them: its study looked at every few seconds, each trial told
once as it is first seen (``started``) and once as it is first seen finished (``finished``), with its row of
the table and its run folder, as ``run_sweep``'s ``on_trial`` tells them in the process that trains them.

The launcher of a sweep (a subprocess, a pod) runs it where the orchestrator cannot hear its trials: the
orchestrator's process watches the study instead (the journal file in the sweep's folder, or the database).
Trials finished before the watch began are not told (an earlier attempt told them, or its caller tells what
no one did when the sweep ends). A study this process cannot read (a journal in another machine's local
cache, a study not created yet) is simply not seen: what the sweep's caller reads when it ends says all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

WATCH_SECONDS = 3.0  # between looks at the study
TrialEvents = Callable[[str, dict[str, Any]], None]


class StudyWatch:
    """One sweep's study, looked at on demand (``look``): its new and newly finished trials told."""

    def __init__(self, out: str, storage: str | None, on_trial: TrialEvents):
        self.out, self.storage, self.on_trial = out.rstrip("/"), storage, on_trial
        self.started: set[int] = set()
        self.finished: set[int] = set()
        self._study: Any = None

    def begin(self) -> None:
        """Before the sweep is launched: its trials finished already (none where there is no study yet) are
        not told; those running are (an earlier attempt's, which this one resumes)."""
        try:
            trials = self._trials() or []
        except Exception:  # the study cannot be read now: every trial seen later is told
            trials = []
        self.finished = {t.number for t in trials if t.state.is_finished()}
        self.started |= self.finished
        with suppress(Exception):
            self.look()

    def look(self) -> None:
        """Tell the trials started and finished since the last look; nothing where the study is not there."""
        from marin_pipelines.sweeps.claims import trial_folder
        from marin_pipelines.sweeps.trial_table import trial_row

        for trial in self._trials() or []:
            row = {**trial_row(trial), "folder": trial_folder(self.out, trial.number)}
            if trial.number not in self.started:
                self.started.add(trial.number)
                self.on_trial("started", row)
            if trial.state.is_finished() and trial.number not in self.finished:
                self.finished.add(trial.number)
                self.on_trial("finished", row)

    def _trials(self) -> list[Any] | None:
        import optuna

        from marin_pipelines.sweeps.study import JOURNAL_STUDY, journal_path

        if self._study is None:
            path = journal_path(self.out, self.storage)
            if path is not None and not Path(path.removeprefix("file://")).is_file():
                return None  # not created yet, or on another machine: never created here
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            if path is None:
                storage: Any = optuna.storages.RDBStorage(str(self.storage))
                name = self.out
            else:
                from optuna.storages.journal import JournalFileBackend

                storage, name = optuna.storages.JournalStorage(JournalFileBackend(path)), JOURNAL_STUDY
            try:
                self._study = optuna.load_study(study_name=name, storage=storage)
            except KeyError:  # the study is not created yet
                return None
        return self._study.get_trials(deepcopy=False)


@contextmanager
def watching(
    out: str, storage: str | None, on_trial: TrialEvents, every: float | None = None
) -> Iterator[StudyWatch]:
    """The study of the sweep in ``out`` (``storage``: as ``run_sweep`` takes it) watched by a thread while
    the body runs (the launched sweep), and looked at once more, in the calling thread, when it ends, even by
    an error: its trials told to ``on_trial`` from the thread while the body runs, then from the caller's.
    A look that fails (a study half written) is tried again at the next; the last one's error is raised,
    unless the body raised its own."""
    watch, stop = StudyWatch(out, storage, on_trial), threading.Event()
    lock = threading.Lock()  # one look at a time: the thread's, then the last one

    def run() -> None:
        while not stop.wait(WATCH_SECONDS if every is None else every):
            try:
                with lock:
                    watch.look()
            except Exception:  # the next look, or the last, sees it
                pass

    watch.begin()
    thread = threading.Thread(target=run, name=f"sweep watch {out}", daemon=True)
    thread.start()
    try:
        yield watch
    except BaseException:
        stop.set()
        thread.join()
        with suppress(Exception):  # the body's error is the one said
            watch.look()
        raise
    stop.set()
    thread.join()
    watch.look()
