"""A sweep: trials of a training run asked of an Optuna study until ``trials`` are finished, each trained in
``OUT/trials/NNNN/`` as any run is, by one or more workers sharing the study; then the sweep's outputs.

``OUT`` holds ``study.journal`` (the study, unless a database stores it), ``trials/NNNN/`` (each trial's run
folder), ``trials.parquet`` (the trial table), ``best.json`` (the best complete trial: params, value, trial
and its whole run config), ``summary.json`` (what the command prints last) and the plots ``history.png``,
``params.png`` and ``curves.png``.

Complete, pruned and failed trials all count towards ``trials``; a failed trial is recorded with its error and
the sweep goes on, but a sweep whose every trial failed fails, with the first trials' errors. Run again with
the same inputs, a sweep continues its study: finished trials are not trained again, and a trial its worker
left running (a killed sweep) is resumed from its checkpoint (``claims``). Several workers (processes of this
machine, or sweeps started apart on one output) share the study and never train one trial twice.

``on_trial(event, row)`` hears, in the worker of the calling process, each trial as it starts (``started``,
or ``resumed``: a trial left by a worker that ended) and as it ends (``finished``): its row of the table
(``trial_table.trial_row``) and its run folder (``folder``): an orchestrator shows trials as they come.
``run_one`` finishes one trial of a sweep: resumed where its worker ended, trained again where it failed.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
import polars as pl
from optuna.trial import TrialState

from marin_pipelines.lease import Lease
from marin_pipelines.orphans import die_with_parent
from marin_pipelines.store import is_local, write_url
from marin_pipelines.sweeps.claims import Claims, asking, trial_folder
from marin_pipelines.sweeps.plan import SweepPlan
from marin_pipelines.sweeps.plots import sweep_plots
from marin_pipelines.sweeps.settings import SweepSettings
from marin_pipelines.sweeps.space import SearchSpace, apply
from marin_pipelines.sweeps.study import make_sampler, trial_seed
from marin_pipelines.sweeps.trial import run_trial
from marin_pipelines.sweeps.trial_table import TABLE_FILE, counts, trial_row, trial_table
from marin_pipelines.train.run_config import RunConfig

BEST_FILE, SUMMARY_FILE = "best.json", "summary.json"
WAIT_SECONDS = 1.0  # between looks at the study while other workers train the last trials
ERRORS_SHOWN = 3  # of a sweep whose every trial failed
RETRY_OF = "retry_of"  # a user attribute of a trial that trains a failed trial's parameters again
TrialEvents = Callable[[str, dict[str, Any]], None]  # (started | resumed | finished, the trial's row)


class SweepFailed(RuntimeError):
    """Every trial of the sweep failed."""


@dataclass(frozen=True)
class BestTrial:
    """The best complete trial: its number, its value of the metric, its parameters and its whole run config
    (the base with them: what a later step trains with)."""

    trial: int
    value: float
    params: dict[str, Any]
    config: RunConfig


@dataclass(frozen=True)
class SweepResult:
    """What a sweep found and spent: the best trial (None while no trial completed), the trials complete,
    pruned and failed, and the training FLOPs of every trial's steps (a pruned trial's up to its stop)."""

    best: BestTrial | None
    complete: int
    pruned: int
    failed: int
    flops: float
    out: str

    def summary(self) -> dict[str, Any]:
        """The command's last line: ``best`` (params, value, trial), ``trials`` (counts) and ``flops``."""
        best = None if self.best is None else {k: getattr(self.best, k) for k in ("params", "value", "trial")}
        trials = {"complete": self.complete, "pruned": self.pruned, "failed": self.failed}
        return {"best": best, "trials": trials, "flops": self.flops}


def run_sweep(
    base: RunConfig,
    data: str,
    space: SearchSpace | Mapping[str, Any],
    settings: SweepSettings,
    out: str,
    storage: str | None = None,
    workers: int = 1,
    progress: bool = True,
    on_trial: TrialEvents | None = None,
) -> SweepResult:
    """Sweep ``space`` (``SearchSpace`` or ``{dotted field: {low, high, log} or [choices]}``) over the run
    ``base`` on the token cache ``data`` until ``settings.trials`` trials are finished, into the folder (or
    URL) ``out``, the study in ``storage`` (a database URL or a journal file; default ``out``'s journal),
    with ``workers`` local processes (this one and ``workers - 1`` more). Bad input is a ValueError before any
    trial trains; ``SweepFailed`` if every trial failed. Progress lines go to stderr unless ``progress`` is
    off. Continues the study found there, if it is this sweep's; another sweep's is refused. ``on_trial``
    hears this process's trials start and end (the module's docstring)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweep says what happens, one line a trial
    plan = SweepPlan.make(base, data, space, settings, out, storage, progress)
    if is_local(plan.out):
        Path(plan.out).mkdir(parents=True, exist_ok=True)
    with asking(plan.out):
        plan.study()  # created (or refused) once, before any worker asks it for trials
    others = [_start_worker(plan, index) for index in range(1, workers)]
    try:
        work(plan, 0, on_trial)
    except BaseException:  # the others would train on alone: they end with this worker
        for process in others:
            process.terminate()
        raise
    finally:
        for process in others:
            process.join()
    if failed := [p.exitcode for p in others if p.exitcode]:
        raise RuntimeError(f"{len(failed)} of the sweep's workers failed (exit codes {failed}); see stderr")
    return finish(plan)


def work(plan: SweepPlan, worker: int, on_trial: TrialEvents | None = None) -> None:
    """Train trials of the sweep's study until ``trials`` are finished (by this worker or others)."""
    with asking(plan.out):
        study = plan.study()
    claims = Claims(plan.out)
    while True:
        with asking(plan.out):
            trials = study.get_trials(deepcopy=False)
            if sum(t.state.is_finished() for t in trials) >= plan.settings.trials:
                return
            if (orphan := claims.orphan(trials)) is not None:
                frozen, lease = orphan
                trial = optuna.Trial(study, frozen._trial_id)
                reported = set(frozen.intermediate_values)
                plan.say(
                    f"trial {trial.number} resumed (worker {worker}; its worker ended): {_said(trial.params)}"
                )
                _tell(on_trial, "resumed", plan, frozen)
            elif len(trials) < plan.settings.trials:
                study.sampler = make_sampler(
                    plan.settings, plan.space, trial_seed(plan.settings.seed, len(trials))
                )
                trial = study.ask(plan.space.distributions())
                lease, reported = claims.new(trial.number), set()
                plan.say(f"trial {trial.number} started (worker {worker}): {_said(trial.params)}")
                _tell(on_trial, "started", plan, study.get_trials(deepcopy=False)[trial.number])
            else:  # every trial handed out: wait for the others' to finish, or for one to be left
                lease = None
        if lease is None:
            time.sleep(WAIT_SECONDS)
            continue
        _train(plan, study, trial, reported, lease, on_trial)


def _train(
    plan: SweepPlan,
    study: optuna.Study,
    trial: optuna.Trial,
    reported: set[int],
    lease: Lease,
    on_trial: TrialEvents | None,
) -> None:
    """Train a trial this worker holds the lease of, let the lease go, and tell that the trial ended."""
    try:
        run_trial(plan, study, trial, reported)
    finally:
        lease.release()
    _tell(on_trial, "finished", plan, study.get_trials(deepcopy=False)[trial.number])


def run_one(plan: SweepPlan, number: int, on_trial: TrialEvents | None = None) -> list[dict[str, Any]]:
    """Trial ``number`` of the sweep, finished, and its rows (``trial_row`` with ``folder``): resumed from its
    checkpoint where no live worker holds it (its sweep was killed), waited for where one does, and trained
    again where it failed, as a new trial of its parameters (Optuna's finished trials are final; the new
    one's ``retry_of`` names it, and it counts towards ``trials`` as any trial does): then its row says
    ``retried_as`` and the retry's row follows. A finished trial (a failed one already retried) is returned
    as it is; a trial the study does not have is a ValueError."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with asking(plan.out):
        study = plan.study()
    claims, target = Claims(plan.out), number
    while True:
        with asking(plan.out):
            trials = study.get_trials(deepcopy=False)
            if number >= len(trials):
                raise ValueError(f"the sweep in {plan.out} has no trial {number}; it has {len(trials)}")
            frozen = trials[target]
            retries = [t for t in trials if t.user_attrs.get(RETRY_OF) == number]
            lease = None
            if target == number and frozen.state == TrialState.FAIL and retries:
                target = retries[0].number
                continue
            if target == number and frozen.state == TrialState.FAIL:
                study.enqueue_trial(frozen.params, user_attrs={RETRY_OF: number})
                study.sampler = make_sampler(
                    plan.settings, plan.space, trial_seed(plan.settings.seed, len(trials))
                )
                trial = study.ask(plan.space.distributions())
                lease, reported, target = claims.new(trial.number), set(), trial.number
                plan.say(
                    f"trial {number} (failed) trained again as trial {trial.number}: {_said(trial.params)}"
                )
                _tell(on_trial, "started", plan, study.get_trials(deepcopy=False)[trial.number])
            elif frozen.state == TrialState.RUNNING and (lease := claims.take(target)) is not None:
                trial, reported = optuna.Trial(study, frozen._trial_id), set(frozen.intermediate_values)
                plan.say(f"trial {target} resumed (its worker ended): {_said(trial.params)}")
                _tell(on_trial, "resumed", plan, frozen)
            elif frozen.state.is_finished():
                rows = [_row(plan, t) for t in {number: trials[number], target: frozen}.values()]
                if target != number:
                    rows[0]["retried_as"] = target
                return rows
        if lease is None:  # another worker trains it, or its worker ended moments ago: look again
            time.sleep(WAIT_SECONDS)
            continue
        _train(plan, study, trial, reported, lease, on_trial)


def _row(plan: SweepPlan, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    return {**trial_row(trial), "folder": trial_folder(plan.out, trial.number)}


def _tell(on_trial: TrialEvents | None, event: str, plan: SweepPlan, trial: optuna.trial.FrozenTrial) -> None:
    if on_trial is not None:
        on_trial(event, _row(plan, trial))


def finish(plan: SweepPlan) -> SweepResult:
    """The sweep's outputs from its study (the same whichever worker writes them); its result."""
    with asking(plan.out):
        study = plan.study()
    table = trial_table(study)
    write_url(f"{plan.out}/{TABLE_FILE}", _parquet(table))
    for name, png in sweep_plots(study, plan.settings.metric).items():
        write_url(f"{plan.out}/{name}", png)
    found = counts(study)
    best = _best(study, plan.base)
    flops = float(table["flops"].sum())
    result = SweepResult(best, found["complete"], found["pruned"], found["failed"], flops, plan.out)
    if best is not None:
        record = {
            **asdict(best),
            "config": best.config.model_dump(mode="json"),
            "metric": plan.settings.metric,
        }
        write_url(f"{plan.out}/{BEST_FILE}", json.dumps(record, indent=2))
    write_url(f"{plan.out}/{SUMMARY_FILE}", json.dumps(result.summary(), indent=2))
    if found["failed"] and not found["complete"] and not found["pruned"]:
        errors = table.filter(table["state"] == "failed").head(ERRORS_SHOWN)
        lines = [f"trial {row['number']}: {row['error']}" for row in errors.iter_rows(named=True)]
        raise SweepFailed(f"every trial of the sweep in {plan.out} failed; the first:\n" + "\n".join(lines))
    return result


def _best(study: optuna.Study, base: RunConfig) -> BestTrial | None:
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not complete:
        return None
    trial = min(complete, key=lambda t: (t.value, t.number))
    return BestTrial(trial.number, float(trial.value), dict(trial.params), apply(base, trial.params))


def _parquet(table: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    table.write_parquet(buffer, compression="zstd")
    return buffer.getvalue()


def _said(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def _start_worker(plan: SweepPlan, index: int) -> multiprocessing.process.BaseProcess:
    """Worker ``index`` as a process of its own (spawned: no copy of this process's JAX runtime)."""
    process = multiprocessing.get_context("spawn").Process(
        target=_worker_process, args=(plan, index, os.getpid()), name=f"sweep worker {index}"
    )
    process.start()
    return process


def _worker_process(plan: SweepPlan, index: int, parent: int) -> None:
    die_with_parent(parent)  # a killed sweep leaves no worker training on
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    work(plan, index)
