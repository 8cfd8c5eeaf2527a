"""A sweep's trials as a table (polars; written as parquet beside the study): one row per trial, from the
study alone, so that any worker, or a later reader of the study, makes the same table."""

from __future__ import annotations

from typing import Any

import optuna
import polars as pl
from optuna.trial import TrialState

TABLE_FILE = "trials.parquet"
COUNTED = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "failed": TrialState.FAIL}
STATES = {state: name for name, state in COUNTED.items()}  # the rest by Optuna's name: running, waiting


def trial_table(study: optuna.Study) -> pl.DataFrame:
    """number, state, params (a struct of the dotted fields), value (the metric at the last step; another
    trial's last report: a pruned trial's at the step it stopped), steps trained, their FLOPs, wall seconds
    and a failed trial's error."""
    rows = [trial_row(trial) for trial in study.get_trials(deepcopy=False)]
    schema = {
        "number": pl.Int64,
        "state": pl.String,
        "value": pl.Float64,
        "steps": pl.Int64,
        "flops": pl.Float64,
        "wall_seconds": pl.Float64,
        "error": pl.String,
    }
    if not rows:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame(rows, schema_overrides=schema, strict=False).sort("number")


def trial_row(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """One trial's row of the table."""
    return {
        "number": trial.number,
        "state": STATES.get(trial.state, trial.state.name.lower()),
        "params": trial.params,
        "value": trial.value if trial.state == TrialState.COMPLETE else _last(trial),
        "steps": trial.user_attrs.get("steps", 0),
        "flops": float(trial.user_attrs.get("flops", 0.0)),
        "wall_seconds": trial.user_attrs.get("wall_seconds"),
        "error": trial.user_attrs.get("error"),
    }


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials complete, pruned and failed."""
    states = [trial.state for trial in study.get_trials(deepcopy=False)]
    return {name: states.count(state) for name, state in COUNTED.items()}


def _last(trial: optuna.trial.FrozenTrial) -> float | None:
    """The last value a trial reported (a pruned trial's, at the step it stopped)."""
    values = trial.intermediate_values
    return values[max(values)] if values else None
