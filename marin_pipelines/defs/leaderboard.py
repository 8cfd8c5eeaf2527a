"""The leaderboard in Dagster: the table over every evaluation, and each new run evaluated by itself.

- ``leaderboard/standard_eval``: the standard suite on one run, a dynamic partition per run (its place in
  the store). The ``new_runs_evaluated`` sensor adds a partition for each finished run that lands in the
  store (from any experiment, or the command line's ``--out`` under the store root) and requests its
  evaluation once per run and suite version. Off by default on the embedded instance, where a laptop's
  every ladder rung would queue an evaluation; on in production (``MARIN_EVALUATE_NEW_RUNS=on``, which the
  Helm values set).
- ``leaderboard``: built from the store (``evals/leaderboard.py``), not from one experiment's graph. It
  depends on every evaluation asset, so declarative automation rebuilds it whenever any of them lands.
"""

import json
import os
from collections.abc import Iterable

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    Config,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    MaterializeResult,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    asset,
    define_asset_job,
    sensor,
)
from pydantic import Field

from marin_pipelines.defs.automation import EXPERIMENT_RUN_TAG, SENSOR_INTERVAL_SECONDS
from marin_pipelines.defs.step_assets import asset_key, dagster_metadata, step_asset
from marin_pipelines.evals import leaderboard as lb
from marin_pipelines.resources.store import ArtifactStoreResource
from marin_pipelines.stages import evals as eval_stages
from marin_pipelines.steps import Step
from marin_pipelines.store import ArtifactStore

RUNS = DynamicPartitionsDefinition(name="evaluated_runs")  # a run's folder under the store root
EVALUATE_NEW_RUNS = "MARIN_EVALUATE_NEW_RUNS"  # "on" in production: the sensor starts running
STANDARD_EVAL_JOB = "standard_evaluation"
LEADERBOARD_KEY = AssetKey(["leaderboard"])
EVAL_STAGES = ("eval_results", "ladder_eval_results", "standard_evaluation")


def standard_eval_of(key: str, root: str) -> Step:
    return eval_stages.standard_eval_step(f"{root.rstrip('/')}/{key}")


def standard_eval_asset(launcher_pool: str | None) -> AssetsDefinition:
    template = eval_stages.standard_eval_step("any run")
    return step_asset(template, [], None, launcher_pool, per_partition=(RUNS, standard_eval_of))


class LeaderboardConfig(Config):
    """How the table ranks and averages (the launchpad's config; automation takes the defaults)."""

    sort: str | None = Field(None, description="a column's label to rank by; none: the average")
    experiment: str | None = Field(
        None,
        description="the table keeps this experiment's rows only (the experiment column's value; the JSON "
        "and parquet keep every row); none: every experiment",
    )
    average: list[str] = Field(
        default_factory=lambda: list(lb.AVERAGE_TASKS),
        description="tasks whose headline scores are averaged (default: what every evaluation asks, the "
        "scored quick tasks)",
    )


def leaderboard_asset(evaluations: Iterable[AssetKey]) -> AssetsDefinition:
    @asset(
        key=LEADERBOARD_KEY,
        group_name="leaderboard",
        deps=list(evaluations),
        kinds={"polars", "matplotlib"},
        required_resource_keys={"store"},
        automation_condition=AutomationCondition.any_deps_updated() & ~AutomationCondition.in_progress(),
        description="Every evaluation in the store, of every experiment and the command line: a row per "
        "model, a column per task metric (with its version and few-shot count) and per bits-per-byte set, "
        "the newest valid result in each cell, the average over the models with every task. Rebuilt "
        "whenever an evaluation lands.",
    )
    def leaderboard(context: AssetExecutionContext, config: LeaderboardConfig) -> MaterializeResult:
        store: ArtifactStore = context.resources.store.store()
        artifact, reused = lb.write_leaderboard(
            store, experiment=config.experiment, sort=config.sort, average=config.average
        )
        context.log.info(f"leaderboard: {artifact.metadata['models']} models ({artifact.url})")
        return MaterializeResult(metadata=dagster_metadata(artifact, reused))

    return leaderboard


def new_runs_sensor(job_name: str) -> SensorDefinition:
    on = os.environ.get(EVALUATE_NEW_RUNS, "").lower() in ("1", "on", "true", "yes")

    @sensor(
        name="new_runs_evaluated",
        job_name=job_name,
        minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
        default_status=DefaultSensorStatus.RUNNING if on else DefaultSensorStatus.STOPPED,
        description="Evaluates each finished run that lands in the store (any experiment's, or a command's "
        "--out under the store root) on the standard suite, once per run and suite version. "
        f"{'On' if on else 'Off'} by default here: {EVALUATE_NEW_RUNS}={'on' if on else 'unset'} "
        "(production sets it on; on a laptop every ladder rung would queue an evaluation).",
    )
    def new_runs_evaluated(
        context: SensorEvaluationContext, store: ArtifactStoreResource
    ) -> SensorResult | SkipReason:
        artifacts = store.store()
        runs = lb.finished_runs(artifacts)  # no evaluation's results read: cheap on a bucket
        asked = set(json.loads(context.cursor)) if context.cursor else set()
        requests, new = [], []
        for key, run in sorted(runs.items()):
            step = standard_eval_of(key, artifacts.root)
            run_key = f"{key}@{step.version}"
            if run_key in asked or artifacts.get(step.key, step.version, key) is not None:
                continue  # asked for already, or evaluated on this suite (by whoever)
            asked.add(run_key)
            new.append(key)
            requests.append(
                RunRequest(run_key=run_key, partition_key=key, tags={EXPERIMENT_RUN_TAG: run.experiment})
            )
        if not requests:
            return SkipReason(f"no new run among the {len(runs)} finished in {artifacts.root}")
        known = set(context.instance.get_dynamic_partitions(RUNS.name))
        return SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[RUNS.build_add_request([k for k in new if k not in known])],
            cursor=json.dumps(sorted(asked)),
        )

    return new_runs_evaluated


def leaderboard_definitions(steps: list[Step], launcher_pool: str | None) -> dict[str, list]:
    """The standard evaluation, the leaderboard over it and every evaluation among ``steps``, the job and
    the sensors that keep them up to date."""
    standard = standard_eval_asset(launcher_pool)
    evaluations = [asset_key(s) for s in steps if s.stage.name in EVAL_STAGES]
    board = leaderboard_asset([*evaluations, standard.key])
    job = define_asset_job(
        STANDARD_EVAL_JOB,
        selection=[standard.key],
        partitions_def=RUNS,
        description="The standard suite on one run: what the new_runs_evaluated sensor requests.",
    )
    updates = AutomationConditionSensorDefinition(
        "leaderboard_updates",
        target=[board.key],
        default_status=DefaultSensorStatus.RUNNING,
        description="Rebuilds the leaderboard whenever an evaluation lands.",
    )
    return {
        "assets": [standard, board],
        "jobs": [job],
        "sensors": [new_runs_sensor(STANDARD_EVAL_JOB), updates],
    }
