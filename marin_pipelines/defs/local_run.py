"""Materialise experiments in this process, in the Dagster instance given (the UI's, for the CLI).

Partitioned steps need one run per partition, so the order is: every crawl snapshot in key order, the
steps a ladder needs, every ladder rung, then everything else (where Dagster orders each step after its
inputs and after its ``after`` edges: a preregistered prediction before its target). Each run goes through
the job that runs those steps from the UI (``automation.py``), tagged with the experiment, so that it lists
under that job and that experiment whoever started it.
This is what `make demo`, `marin-pipelines experiment NAME` and the end-to-end tests run.

A step whose output is complete at its version (and passes its blocking checks) starts no run: its checks
are evaluated on the stored output here, and a run selects only the steps still missing. A rerun that finds
everything done starts no Dagster run at all (seconds, not a minute of run bookkeeping), and leaves no new
event in the instance where it already shows the output at that version; where it does not (made by
another instance or a store shared with another machine), the output is reported to it once, so that the UI
shows every asset of the experiment materialised.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetCheckSeverity,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
)

from marin_pipelines.defs.automation import (
    after_ladders,
    after_ladders_job,
    ladder_job,
    partition_sources,
    partitioned_by,
    pipeline_job,
    run_tags,
    snapshot_job,
)
from marin_pipelines.defs.step_assets import asset_key, dagster_metadata, snapshot_partitions
from marin_pipelines.execution_record import write_record
from marin_pipelines.experiment import Experiment
from marin_pipelines.steps import CheckOutcome, Step, check_reason, topological
from marin_pipelines.store import ArtifactStore, default_store_root

log = logging.getLogger(__name__)
# Dagster's console logger would print a failed step's whole traceback; the caller gets the error instead.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass
class Materialized:
    """One asset (partition): materialised by a run, or found complete in the store (then reused)."""

    asset: str
    partition: str | None
    reused: bool
    metadata: dict = field(default_factory=dict)


@dataclass
class ExperimentRun:
    materialized: list[Materialized] = field(default_factory=list)
    checks: list[CheckOutcome] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)

    @property
    def reused(self) -> int:
        return sum(m.reused for m in self.materialized)

    @property
    def failed_checks(self) -> list[CheckOutcome]:
        return [c for c in self.checks if not c.passed]

    @property
    def checks_passed(self) -> bool:
        """No blocking check failed (a missed preregistered prediction warns, it does not fail)."""
        return not any(c.blocking for c in self.failed_checks)


@dataclass
class PlannedRun:
    """One Dagster run of the plan: its steps, its partition and the job (of ``automation.py``) it runs as."""

    steps: list[Step]
    partition: str | None
    job: str


def run_plan(experiment: Experiment, steps: list[Step]) -> list[PlannedRun]:
    """The runs of ``steps`` (the experiment's, or some of them), in an order where every run finds its
    inputs done, each under the job that runs those steps from the UI."""
    plan: list[PlannedRun] = []
    crawls = partition_sources(steps, "snapshot")
    snapshot_steps = [s for crawl in crawls for s in partitioned_by(steps, crawl)]
    # what a per-snapshot step reads unpartitioned (the dump a corpus step reads) runs first
    if first := [s for s in topological(snapshot_steps) if s.partitioning is None]:
        plan.append(PlannedRun(first, None, pipeline_job(experiment)))
    for crawl in crawls:
        keys = crawl.partition_keys(strict=True)  # a missing crawl root: its clear error
        plan += [PlannedRun(partitioned_by(steps, crawl), key, snapshot_job(crawl)) for key in keys]
    ladders = partition_sources(steps, "ladder")
    ladder_steps = [s for ladder in ladders for s in partitioned_by(steps, ladder)]
    before = [s for s in topological(ladder_steps) if s.partitioning is None and s not in first]
    if before:
        plan.append(PlannedRun(before, None, pipeline_job(experiment)))
    for ladder in ladders:
        plan += [
            PlannedRun(partitioned_by(steps, ladder), key, ladder_job(ladder))
            for key in ladder.partition_keys()
        ]
    later = after_ladders(steps)
    rest = [s for s in steps if s.partitioning is None and s not in before and s not in first]
    if pipeline := [s for s in rest if id(s) not in later]:
        plan.append(PlannedRun(pipeline, None, pipeline_job(experiment)))
    if following := [s for s in rest if id(s) in later]:
        plan.append(PlannedRun(following, None, after_ladders_job(experiment)))
    return plan


def materialize_experiment(
    experiment: Experiment,
    store_root: str | None = None,
    instance: DagsterInstance | None = None,
    through: str | None = None,
    resources: dict[str, Any] | None = None,
    others: list[Experiment] | None = None,
) -> ExperimentRun:
    """Run every step of ``experiment`` (or only those ``through`` needs, a step name) that is not done.

    Stops at the first failure. Snapshots become dynamic partitions of ``instance`` (an ephemeral one by
    default), as the sensor adds them in the UI. ``others``: experiments whose steps share the assets
    (their tags and execution records), as in the UI.
    """
    steps = experiment.all_steps if through is None else experiment.step(through).upstream()
    store = resources["store"].store() if resources else ArtifactStore(store_root or default_store_root())
    instance = instance or DagsterInstance.ephemeral()
    for crawl in partition_sources(steps, "snapshot"):
        name = snapshot_partitions(crawl).name
        known = set(instance.get_dynamic_partitions(name))
        instance.add_dynamic_partitions(
            name, [s for s in crawl.partition_keys(strict=True) if s not in known]
        )
    report = ExperimentRun()
    defs: Definitions | None = None  # built on the first run needed: a rerun with everything done needs none
    for run in run_plan(experiment, steps):
        missing = [
            step for step in run.steps if not _reuse_stored(report, store, step, run.partition, instance)
        ]
        if not missing:
            continue
        if defs is None:  # the assets and resources bring the launchers' clients: only for a run
            from marin_pipelines.defs.experiments_component import experiment_definitions
            from marin_pipelines.resources import default_resources

            everyone = [experiment, *[e for e in others or [] if e.name != experiment.name]]
            resources = resources or default_resources(store_root)
            defs = Definitions.merge(experiment_definitions(everyone), Definitions(resources=resources))
        result = defs.resolve_job_def(run.job).execute_in_process(
            asset_selection=[asset_key(step) for step in missing],
            partition_key=run.partition,
            instance=instance,
            run_config=QUIET,
            tags=run_tags([experiment]),  # the experiment run, whichever job's steps it takes
        )
        report.run_ids.append(result.run_id)
        report.materialized += _materialized(result)
        report.checks += [
            CheckOutcome(
                e.asset_key.to_user_string(),
                e.check_name,
                e.passed,
                e.severity != AssetCheckSeverity.WARN,
                check_reason(_plain(e.metadata)),
            )
            for e in result.get_asset_check_evaluations()
        ]
    write_record(store, experiment)
    return report


def _reuse_stored(
    report: ExperimentRun, store: ArtifactStore, step: Step, partition: str | None, instance: DagsterInstance
) -> bool:
    """Report ``step``'s complete output (and its checks, evaluated on it) as reused, as its run would;
    False when it is missing, or fails a blocking check: its run reports that, and blocks what follows."""
    artifact = store.get(step.key, step.version, partition)
    if artifact is None:
        return False
    checks = [
        CheckOutcome(step.name, name, passed, check.blocking, check_reason(found))
        for name, check in step.stage.checks.items()
        for passed, found in [check.fn(artifact)]
    ]
    if any(c.blocking and not c.passed for c in checks):
        return False
    label = step.name + (f" [{partition}]" if partition else "")
    of = f" of {artifact.same_as}" if artifact.same_as else ""
    log.info(f"{label}: reused version {step.version}{of} ({artifact.url}), no run needed")
    metadata = dagster_metadata(artifact, True, step.stage.headline, step.stage.labels)
    _record_in_instance(instance, step, partition, metadata)
    report.materialized.append(Materialized(step.name, partition, True, _plain(metadata)))
    report.checks += checks
    return True


def _record_in_instance(
    instance: DagsterInstance, step: Step, partition: str | None, metadata: dict[str, Any]
) -> None:
    """An output found complete in the store that this instance never saw materialised at its version (made
    by another instance, or before the command line recorded its runs in the UI's) is reported to it, once:
    else the UI would show the asset as never materialised while every run reuses it."""
    key = asset_key(step)
    found = instance.fetch_materializations(
        AssetRecordsFilter(key, asset_partitions=[partition] if partition else None), limit=1
    ).records
    latest = found[0].asset_materialization if found else None
    version = latest.metadata.get("version") if latest is not None else None
    if getattr(version, "value", version) == step.version:
        return
    description = "found complete in the store at this version and reused (made elsewhere)"
    instance.report_runless_asset_event(
        AssetMaterialization(key, partition=partition, description=description, metadata=metadata)
    )


def _materialized(result: ExecuteInProcessResult) -> list[Materialized]:
    out = []
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        metadata = _plain(mat.metadata)
        out.append(
            Materialized(
                mat.asset_key.to_user_string(), mat.partition, bool(metadata.get("reused")), metadata
            )
        )
    return out


def _plain(metadata: dict[str, Any]) -> dict[str, Any]:
    """Dagster metadata values as the plain values they hold."""
    return {k: getattr(v, "value", v) for k, v in metadata.items()}


def materialize_leaderboard(store_root: str | None, instance: DagsterInstance) -> dict[str, Any]:
    """The leaderboard materialised in ``instance`` as the UI's automation would after an evaluation (the
    command line runs no daemon); its metadata, as plain values."""
    from dagster import materialize

    from marin_pipelines.defs.leaderboard import LEADERBOARD_KEY, leaderboard_definitions
    from marin_pipelines.resources import default_resources

    board = next(a for a in leaderboard_definitions([], None)["assets"] if a.key == LEADERBOARD_KEY)
    result = materialize(
        [board], instance=instance, resources=default_resources(store_root), run_config=QUIET
    )
    return _plain(result.asset_materializations_for_node(board.op.name)[0].metadata)
