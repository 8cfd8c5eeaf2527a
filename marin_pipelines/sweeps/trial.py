"""One trial of a sweep: the base run with the trial's parameters, trained in the trial's folder like any run
(the same folder format, resumed from its last checkpoint), reporting the sweep's metric to the study as it
trains and stopped at once when the pruner says so. The study records how it ended: complete (its value, the
metric at the last step), pruned (at the step it stopped) or failed (the error), with the steps it trained,
their FLOPs and its seconds in the trial's user attributes."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import optuna
from optuna.trial import TrialState
from upath import UPath

from marin_pipelines.sweeps.claims import trial_folder
from marin_pipelines.sweeps.plan import SweepPlan
from marin_pipelines.sweeps.space import apply
from marin_pipelines.train.launch_config import TrainLaunch
from marin_pipelines.train.launched import train_launched
from marin_pipelines.train.reporting import Reports, StopTraining
from marin_pipelines.train.train_config import METRICS_FILE

ERROR_CHARS = 2000  # of a failed trial's error, kept in the study


def run_trial(plan: SweepPlan, study: optuna.Study, trial: optuna.Trial, reported: set[int]) -> TrialState:
    """Train ``trial`` (its reports at the steps in ``reported`` already in the study: a resumed trial) and
    tell the study how it ended."""
    folder, metric = trial_folder(plan.out, trial.number), plan.settings.metric
    began, flops_per_step, steps = time.perf_counter(), 0, 0
    value: float | None = None
    state, error = TrialState.COMPLETE, None

    def on_report(step: int, metrics: dict[str, float]) -> None:
        if metric not in metrics:  # settings check it; a trainer reporting other metrics gets here
            raise ValueError(f"no trial reports {metric!r}; this one reported {', '.join(metrics)}")
        if step not in reported:
            trial.report(metrics[metric], step)
            reported.add(step)
        if step < steps and trial.should_prune():
            plan.say(f"trial {trial.number} pruned at step {step}: {metric} {metrics[metric]:.4f}")
            raise StopTraining(f"pruned at step {step}")

    try:
        run = apply(plan.base, trial.params)
        model = run.llama(plan.vocab_size)
        steps, flops_per_step = (
            run.train.steps,
            model.flops_per_token() * run.train.batch_size * model.seq_len,
        )
        reports = Reports(plan.report_every, on_report, plan.settings.validation_batches)
        train_launched(TrainLaunch(run=run, data=plan.data, out=folder), reports=reports)
        value = final_value(folder, metric, steps)
        if not math.isfinite(value):
            state, error = TrialState.FAIL, f"{metric} is {value} at the last step"
    except StopTraining:
        state = TrialState.PRUNED
    except Exception as e:  # a trial's own failure (its config, a diverging run): counted, the sweep goes on
        state, error = TrialState.FAIL, f"{type(e).__name__}: {e}"[:ERROR_CHARS]
    trained = len(read_metrics(folder))
    seconds = time.perf_counter() - began + float(trial.user_attrs.get("wall_seconds", 0.0))
    attrs: dict[str, Any] = {
        "steps": trained,
        "flops": float(trained * flops_per_step),
        "wall_seconds": seconds,
    }
    for key, item in (attrs | ({"error": error} if error else {})).items():
        trial.set_user_attr(key, item)
    study.tell(trial.number, value if state == TrialState.COMPLETE else None, state=state)
    if state == TrialState.COMPLETE:
        plan.say(
            f"trial {trial.number} complete: {metric} {value:.4f} after {trained} steps ({seconds:.1f} s)"
        )
    elif state == TrialState.FAIL:
        plan.say(f"trial {trial.number} failed: {error}")
    return state


def read_metrics(folder: str) -> list[dict[str, Any]]:
    """The steps a trial's run recorded (none where it never started)."""
    path = UPath(folder) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def final_value(folder: str, metric: str, steps: int) -> float:
    """The metric the run reported at its last step."""
    last = read_metrics(folder)[-1:]
    if not last or last[0]["step"] + 1 != steps or metric not in last[0]:
        raise ValueError(f"{folder} has no {metric} at its last step ({steps})")
    return float(last[0][metric])
