"""A sweep as a step: Bayesian search over a training step's config (``sweeps/``), its winner an input.

The step's config is the base training step's (``TrainRunConfig``), the search space over it (dotted fields of
the run config, checked against it when the step is declared) and the search's settings, so its version hashes
all three; its inputs are the base step's (the token cache, the mixture's caches). The step checks its
inputs, then has its launcher run the sweep (``SweepLaunch``: ``python -m marin_pipelines.cli sweep
--step-config FILE`` in a subprocess or a pod on the accelerator, as training runs; in this process for
``run_steps``' in-process launcher), which runs ``sweeps.sweep.run_sweep`` in the output's work folder, keyed
by the version: the study (a journal file), the trials' run folders (``trials/NNNN``) and the leases live
there, so a retry after a kill continues the study (finished trials are not trained again; the trial a killed
run left is resumed from its checkpoint). On a bucket store the journal is kept in the launched process's
local cache (a journal file is a local file) and copied into the work folder when the sweep ends;
``MARIN_SWEEP_STORAGE`` (a database URL: a Postgres database of the production instance's server, not the
instance's own database, whose ``alembic_version`` table Optuna's would collide with) stores every sweep's
study there instead, shared by runs on every machine.

While the launched sweep runs, this process watches its study every few seconds (``sweeps.watch``) and tells
each trial's start and end as ``trial`` events (the Dagster asset adds its partition and reports it); a study
it cannot read meanwhile (a journal in a pod's local cache) is told when the sweep ends. The sweep's outcome
is read from the work folder (``summary.json``); a sweep that cannot succeed (every trial failed, bad input)
leaves ``failed.json`` there and fails the step for good (``InputError``), while a killed child's failure
is retried.

The output is the work folder, whole: the study journal, ``trials/NNNN/``, ``trials.parquet``, ``best.json``,
``summary.json`` and the plots, with metadata: the best trial (params, value, number), the trials complete,
pruned and failed, the FLOPs, a markdown trial table and the plots. A training step with the sweep as its
``best_of`` input trains with ``best.json``'s parameters over its own config (``stages/train.py``).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any

import fsspec
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from marin_pipelines.stages.train import TrainRunConfig, check_trainable
from marin_pipelines.steps import InputError, Launcher, StepContext, local_work_dir, stage
from marin_pipelines.store import Artifact, PendingArtifact, is_local
from marin_pipelines.sweeps.launch_config import SweepLaunch
from marin_pipelines.sweeps.launched import forget_outcome, read_failure, read_result
from marin_pipelines.sweeps.plots import CURVES_FILE, HISTORY_FILE, PARAMS_FILE
from marin_pipelines.sweeps.settings import SweepSettings
from marin_pipelines.sweeps.space import SearchSpace
from marin_pipelines.sweeps.study import JOURNAL_FILE
from marin_pipelines.sweeps.trial_table import TABLE_FILE
from marin_pipelines.sweeps.watch import watching
from marin_pipelines.train.train_config import LOSS_CURVE_FILE

SWEEP_STORAGE = "MARIN_SWEEP_STORAGE"  # a database URL for every sweep step's study (production's Postgres)
PLOTS = {"history": HISTORY_FILE, "params": PARAMS_FILE, "curves": CURVES_FILE}
ERROR_CHARS = 120  # of a failed trial's error, in the markdown table


class SweepStepConfig(BaseModel):
    """A sweep step: the base training step's config, the space searched over it and the search."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: TrainRunConfig = Field(description="the config of the training step swept (its `checkpoint`)")
    space: dict[str, Any] = Field(
        description="dotted fields of the run config -> {low, high, log, step, int, grid} or [choices]"
    )
    settings: SweepSettings = Field(description="the search: trials, sampler, pruner, metric and seed")

    @model_validator(mode="after")
    def _space_over_the_base(self) -> SweepStepConfig:
        SearchSpace.parse(self.space, self.base.run_config())  # a field the run lacks: said when declared
        return self


def sweep_storage(work: str) -> str | None:
    """Where a sweep step's study lives: ``MARIN_SWEEP_STORAGE`` where it is set; else the journal file in
    the work folder (None: the core's default), or, on a bucket store, in the local cache's folder for it."""
    if url := os.environ.get(SWEEP_STORAGE):
        return url
    return None if is_local(work) else str(local_work_dir(work) / JOURNAL_FILE)


def sweep_arguments(
    name: str, config: SweepStepConfig, tokenized_cache: Artifact, caches: dict[str, Artifact], work: str
) -> dict[str, Any]:
    """``run_sweep``'s (and ``SweepPlan.make``'s) arguments for the sweep step ``name`` in the work folder
    ``work``: the base run on the step's caches, checked as a training step checks it."""
    vocab_size = tokenized_cache.metadata["vocab_size"]
    try:
        mixture = config.base.data_mixture.with_inputs({key: cache.url for key, cache in caches.items()})
    except ValueError as e:
        raise InputError(f"{name}: {e}") from None
    model, train = config.base.resolve(vocab_size)
    check_trainable(tokenized_cache, mixture, model, train)
    return {
        "base": config.base.run_config(vocab_size, mixture),
        "data": tokenized_cache.url,
        "space": config.space,
        "settings": config.settings,
        "out": work,
        "storage": sweep_storage(work),
    }


def sweep_launch(arguments: dict[str, Any]) -> SweepLaunch:
    """What the launched sweep is told: ``arguments``, a database URL from ``MARIN_SWEEP_STORAGE`` named by
    its variable (the launcher hands it on), never written into the file kept with the output."""
    if os.environ.get(SWEEP_STORAGE):
        return SweepLaunch(**{**arguments, "storage": None}, storage_from=SWEEP_STORAGE)
    return SweepLaunch(**arguments)


def launch_watched(
    name: str,
    launcher: Launcher,
    arguments: dict[str, Any],
    on_trial: Callable[[str, dict[str, Any]], None],
    trial: int | None = None,
) -> None:
    """The sweep of ``run_sweep``'s ``arguments`` (or its one ``trial``) run by ``launcher``, its study
    watched meanwhile, each trial's start and end told to ``on_trial`` as the child trains it. Bad input
    (checked here, before a child is launched) and a failure the child wrote down (every trial failed, no
    such trial) are an ``InputError`` naming the step ``name``: no retry mends them. Any other failure of the
    child (killed, preempted) is raised as it is, and a retry continues the study."""
    from marin_pipelines.sweeps.plan import SweepPlan  # JAX: the inputs checked as the child checks them

    try:
        SweepPlan.make(**arguments)
    except ValueError as e:
        raise InputError(f"{name}: {e}") from None
    work = arguments["out"]
    forget_outcome(work, trial)
    try:
        with watching(work, arguments["storage"], on_trial):
            launcher.sweep(sweep_launch(arguments if trial is None else {**arguments, "trial": trial}))
    except Exception:
        if (reason := read_failure(work, trial)) is not None:
            raise InputError(f"{name}: {reason}") from None
        raise


SWEEP_HEADLINE = ("best_value", "best_trial", "complete", "pruned", "failed", "flops")


@stage(
    SweepStepConfig,
    group="train",
    kinds=("optuna", "jax"),
    needs=("launcher",),  # the accelerator's pool and the retry policy (a retry continues the study)
    headline=SWEEP_HEADLINE,
)
def sweep(
    ctx: StepContext,
    out: PendingArtifact,
    config: SweepStepConfig,
    tokenized_cache: Artifact,
    **caches: Artifact,
) -> None:
    """A sweep over a training step's config (Optuna: TPE, random or grid; Hyperband or median pruning):
    each trial a training run that reports its metric as it trains, the bad ones stopped early. The output
    holds the study, each trial's run folder, the trial table, the best config (``best.json``: what a
    training step with this sweep as its ``best_of`` input trains with) and the plots."""
    arguments = sweep_arguments(ctx.step.name, config, tokenized_cache, caches, out.work)

    def on_trial(event: str, row: dict[str, Any]) -> None:
        ctx.events("trial", {"event": event, **row})

    launch_watched(ctx.step.name, ctx.launcher, arguments, on_trial)
    out.keep_work()
    result = read_result(out.work)
    table = read_table(out.work)
    best, trials = result["best"], result["trials"]
    out.metadata.update(
        metric=config.settings.metric,
        complete=trials["complete"],
        pruned=trials["pruned"],
        failed=trials["failed"],
        flops=result["flops"],
        **(
            {"best_value": best["value"], "best_trial": best["trial"], "best_params": best["params"]}
            if best is not None
            else {}
        ),
        markdown={"trials": markdown_table(table, config.settings.metric)},
        plots=PLOTS,
    )


def read_table(folder: str) -> pl.DataFrame:
    """The trial table a sweep wrote in ``folder`` (a path or URL)."""
    return pl.read_parquet(io.BytesIO(read_bytes(f"{folder.rstrip('/')}/{TABLE_FILE}")))


def committed_rows(artifact: Artifact) -> dict[int, dict[str, Any]]:
    """A finished sweep's trials by number: their rows of the table and their run folders."""
    table = pl.read_parquet(io.BytesIO(artifact.read_bytes(TABLE_FILE)))
    return {
        row["number"]: {**row, "folder": f"{artifact.url}/trials/{row['number']:04d}"}
        for row in table.iter_rows(named=True)
    }


def trial_curve(folder: str) -> bytes | None:
    """A trial's loss curve (PNG), None where it has none yet."""
    try:
        return read_bytes(f"{folder.rstrip('/')}/{LOSS_CURVE_FILE}")
    except FileNotFoundError:
        return None


def markdown_table(table: pl.DataFrame, metric: str) -> str:
    """The trials as a markdown table: number, state, each parameter, the metric, steps, FLOPs, error."""
    names = list(table["params"].struct.fields) if len(table) else []
    lines = [
        "| trial | state | " + " | ".join(names) + f" | {metric} | steps | FLOPs | error |",
        "|---:|---|" + "---:|" * len(names) + "---:|---:|---:|---|",
    ]
    for row in table.iter_rows(named=True):
        params = [_number(row["params"].get(name)) for name in names]
        error = (row["error"] or "").replace("|", "/").replace("\n", " ")[:ERROR_CHARS]
        cells = [str(row["number"]), row["state"], *params, _number(row["value"]), str(row["steps"])]
        lines.append("| " + " | ".join([*cells, f"{row['flops']:.3g}", error]) + " |")
    return "\n".join(lines)


def _number(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def read_bytes(url: str) -> bytes:
    fs, path = fsspec.core.url_to_fs(url)
    return fs.cat_file(path)
