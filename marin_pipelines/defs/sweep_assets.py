"""A sweep in Dagster: the sweep step's own asset (its summary) and its trials, one dynamic partition each.

- ``{sweep}`` (e.g. ``opt_sweep/muon``), the step's asset, has the launcher run the sweep
  (``stages/sweep.py``: a subprocess or a pod, which cannot reach the instance) and watches its study
  meanwhile (``sweeps/watch.py``, every few seconds, from a thread of this process: the launcher's call
  stays in the compute thread, where a terminated run's interrupt reaches Pipes, which stops the child). As
  the watch first sees each trial, the trial's partition (its number: ``0007``) is added to
  ``{sweep}/trials``; as it first sees the trial ended, a materialisation of that partition is reported with
  the trial's params, value, state, steps, FLOPs, wall seconds, error and loss curve. The asset's own
  metadata says what the sweep found: the best trial, the trials complete, pruned and failed, the FLOPs,
  the trial table and the plots. Trials the watch did not see (a study it cannot read while the child runs:
  a journal in a pod's local cache) are reported when the sweep ends: every trial whose partition this
  instance has no materialisation of. A run that reuses the output trains and reports nothing new.
- ``{sweep}/trials``, materialised alone (a trial's page in the UI, or a failed trial retried from there):
  while the sweep's output is not complete, the launcher finishes that one trial (``SweepLaunch`` with its
  ``trial``: ``sweeps.sweep.run_one`` in the child) in the sweep's work folder: resumed from its checkpoint
  where the run training it ended (killed, preempted), waited for where another run trains it, trained again
  where it failed (as a new trial of its parameters; the failed one's row says ``retried_as``). The study is
  watched meanwhile as for the sweep's asset, so the retry's partition is added and reported as it is seen
  (where the watch cannot read the study, from the rows the child writes to ``trial_NNNN.json``, which the
  trial's own materialisation reports); then the sweep's own asset, run again, continues the study and
  finishes. Once the sweep's output is complete its trials are final (a version is one output):
  materialising a trial reports it from the output.

Any number of runs of one sweep (the sweep's asset twice, or beside a trial's run, on one machine or sharing
the Postgres study of ``MARIN_SWEEP_STORAGE``) share its study and never train one trial twice: the core's
claims give each trial to one worker at a time.
"""

import base64
from collections.abc import Callable, Iterator
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    DynamicPartitionsDefinition,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from marin_pipelines.defs.step_assets import EXPERIMENT_TAG, BoundLauncher, asset_in, readable, slug
from marin_pipelines.experiment import Experiment
from marin_pipelines.stages.sweep import committed_rows, launch_watched, sweep_arguments, trial_curve
from marin_pipelines.steps import InputError, Step
from marin_pipelines.sweeps.launched import read_trial

Events = Callable[[str, dict[str, Any]], None]


def trials_key(step: Step) -> AssetKey:
    return AssetKey([*step.key, "trials"])


def trial_partitions(step: Step) -> DynamicPartitionsDefinition:
    return DynamicPartitionsDefinition(name=f"{slug(step)}_trials")


def trial_key(number: int) -> str:
    return f"{number:04d}"


def trial_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """A trial's row (``trial_table.trial_row`` with its ``folder``) as the UI's metadata."""
    metadata: dict[str, Any] = {
        "state": row["state"],
        **({"value": readable(row["value"])} if row.get("value") is not None else {}),
        "params": MetadataValue.json(dict(row["params"] or {})),
        "steps": int(row["steps"] or 0),
        "flops": readable(float(row["flops"] or 0), "flops"),
        **({"wall_seconds": round(row["wall_seconds"], 1)} if row.get("wall_seconds") is not None else {}),
        **({"error": MetadataValue.text(row["error"])} if row.get("error") else {}),
        **({"retried_as": trial_key(row["retried_as"])} if row.get("retried_as") is not None else {}),
        "path": MetadataValue.path(row["folder"]),
    }
    curve = trial_curve(row["folder"])
    if curve is not None:
        png = base64.b64encode(curve).decode()
        metadata["loss_curve"] = MetadataValue.md(f"![loss curve](data:image/png;base64,{png})")
    return metadata


class TrialReporter:
    """A sweep's trials told to the instance from inside a run: each trial's partition added as it starts,
    its materialisation logged as it ends (not ``own``'s: the asset reports that partition itself), once.
    Called from the sweep's watch thread while the launched sweep runs (``sweeps/watch.py``), one call at a
    time, then from the compute thread: the instance's calls and ``log_event`` (logged to the instance at
    once), as Pipes' own message thread logs."""

    def __init__(self, context: AssetExecutionContext, step: Step, own: str | None = None):
        self.context, self.step, self.own = context, step, own
        self.partitions = trial_partitions(step).name
        self.reported: set[str] = set()

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "trial":
            key = trial_key(data["number"])
            self.add([key])
            if data["event"] == "finished" and key != self.own and key not in self.reported:
                self.report(key, data)
        elif event == "built":  # the sweep's output: every trial this instance has not seen materialised
            rows = committed_rows(data["artifact"])
            self.add([trial_key(number) for number in rows])
            seen = self.context.instance.get_materialized_partitions(trials_key(self.step))
            for number, row in rows.items():
                if (key := trial_key(number)) not in seen and key not in self.reported:
                    self.report(key, row)

    def add(self, keys: list[str]) -> None:
        known = set(self.context.instance.get_dynamic_partitions(self.partitions))
        if new := [key for key in keys if key not in known]:
            self.context.instance.add_dynamic_partitions(self.partitions, new)

    def report(self, key: str, row: dict[str, Any]) -> None:
        self.context.log_event(
            AssetMaterialization(
                trials_key(self.step),
                partition=key,
                description=f"trial {key} of {self.step.name}: {row['state']}",
                metadata=trial_metadata(row),
            )
        )
        self.reported.add(key)


def sweep_events(step: Step) -> Callable[[AssetExecutionContext], Events]:
    """What the sweep step's asset tells the instance of its trials (``step_asset``'s ``events``)."""
    return lambda context: TrialReporter(context, step)


def trials_asset(step: Step, users: list[Experiment], launcher_pool: str | None) -> AssetsDefinition:
    """The sweep step's trials, a dynamic partition each (added by the sweep's own asset as they start)."""

    @asset(
        key=trials_key(step),
        group_name=step.key[0],
        description=f"The trials of the sweep {step.name}, one partition each (its number), with its params, "
        "value, state, steps, FLOPs and loss curve. Materialising one has the launcher finish it through "
        "the sweep's study (resumed where its run ended, trained again where it failed) while the sweep is "
        "not complete; "
        f"afterwards it is reported from the sweep's output.\n\nDeclared at {step.declared_at}.",
        ins={name: asset_in(step, name) for name in step.inputs},
        partitions_def=trial_partitions(step),
        required_resource_keys={"store", "launcher"},
        kinds={"optuna", "jax"},
        tags={EXPERIMENT_TAG.format(e.name): "" for e in users},
        pool=launcher_pool,
        metadata={"sweep": step.name},
    )
    def trials(context: AssetExecutionContext, **inputs: Any) -> Iterator[MaterializeResult]:
        store = context.resources.store.store()
        key = context.partition_key
        number = int(key)
        artifact = store.get(step.key, step.version)
        if artifact is not None:
            rows = committed_rows(artifact)
            if number not in rows:
                raise Failure(
                    f"the sweep {step.name} ({artifact.url}) has no trial {key}", allow_retries=False
                )
            context.log.info(f"trial {key} of {step.name}: from the complete sweep ({artifact.url})")
            yield MaterializeResult(metadata=trial_metadata(rows[number]))
            return
        cache = inputs.pop("tokenized_cache")
        try:
            work = store.work_url(step.key, step.version)
            rows = launch_trial(
                context, step, number, sweep_arguments(step.name, step.config, cache, inputs, work)
            )
        except (InputError, ValueError) as e:  # no trial of that number, bad input: a retry cannot help
            raise Failure(description=str(e), allow_retries=False) from e
        yield MaterializeResult(metadata=trial_metadata(rows[0]))

    return trials


def launch_trial(
    context: AssetExecutionContext, step: Step, number: int, arguments: dict[str, Any]
) -> list[dict[str, Any]]:
    """Trial ``number`` of the sweep (``run_sweep``'s ``arguments``) finished by the launcher (``run_one`` in
    its child), its study watched meanwhile as the sweep's asset watches it: a retry's partition added and
    reported as it is seen. Its rows, read back from the child's ``trial_NNNN.json``; the retry's partition
    added and reported from them where the watch did not see it (a study in a pod's local cache)."""
    reporter = TrialReporter(context, step, own=trial_key(number))

    def on_trial(event: str, row: dict[str, Any]) -> None:
        reporter("trial", {"event": event, **row})

    launcher = BoundLauncher(context.resources.launcher, context)
    launch_watched(step.name, launcher, arguments, on_trial, trial=number)
    rows = read_trial(arguments["out"], number)["rows"]
    for row in rows[1:]:  # the retry, where the watch did not tell it
        on_trial("finished", row)
    return rows
