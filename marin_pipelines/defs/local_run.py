"""Materialise experiments in this process, in the Dagster instance given (the UI's, for the CLI).

Partitioned steps need one run per partition, so the order is: every crawl snapshot in key order, the
steps a ladder needs, every ladder rung, then everything else in one run (where Dagster orders each
step after its inputs and after its ``after`` edges: a preregistered prediction before its target).
This is what `make demo`, `marin-pipelines experiment NAME` and the end-to-end tests run.

A step whose output is complete at its version (and passes its blocking checks) starts no run: its checks
are evaluated on the stored output here, and a run selects only the steps still missing. A rerun that finds
everything done starts no Dagster run at all (seconds, not a minute of run bookkeeping), and leaves no new
event in the instance: the output is the same data version the instance already shows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from dagster import AssetCheckSeverity, DagsterInstance, ExecuteInProcessResult, materialize

from marin_pipelines.defs.automation import partition_sources, partitioned_by, selection
from marin_pipelines.defs.step_assets import dagster_metadata, snapshot_partitions
from marin_pipelines.execution_record import write_record
from marin_pipelines.experiment import Experiment
from marin_pipelines.steps import Step, topological
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
class CheckOutcome:
    asset: str
    check: str
    passed: bool
    blocking: bool = True  # False for WARN-severity checks: a result to report, not a broken pipeline

    def __str__(self) -> str:
        return f"{self.asset}:{self.check}"


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


def run_plan(steps: list[Step]) -> list[tuple[list[Step], str | None]]:
    """(steps, partition) per run, in an order where every run finds its inputs done."""
    plan: list[tuple[list[Step], str | None]] = []
    for crawl in partition_sources(steps, "snapshot"):
        keys = crawl.partition_keys(strict=True)  # a missing crawl root: its clear error
        plan += [(partitioned_by(steps, crawl), key) for key in keys]
    ladders = partition_sources(steps, "ladder")
    ladder_steps = [s for ladder in ladders for s in partitioned_by(steps, ladder)]
    before = [s for s in topological(ladder_steps) if s.partitioning is None]
    if before:
        plan.append((before, None))
    for ladder in ladders:
        plan += [(partitioned_by(steps, ladder), key) for key in ladder.partition_keys()]
    rest = [s for s in steps if s.partitioning is None and s not in before]
    if rest:
        plan.append((rest, None))
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
    assets: list | None = None  # built on the first run needed: a rerun with everything done needs none
    for group, partition in run_plan(steps):
        missing = [step for step in group if not _reuse_stored(report, store, step, partition)]
        if not missing:
            continue
        if assets is None:  # the assets and resources bring the launchers' clients: only for a run
            from marin_pipelines.defs.experiments_component import experiment_definitions
            from marin_pipelines.resources import default_resources

            everyone = [experiment, *[e for e in others or [] if e.name != experiment.name]]
            assets = list(experiment_definitions(everyone).assets or [])
            resources = resources or default_resources(store_root)
        result = materialize(
            assets,
            selection=selection(missing),
            partition_key=partition,
            instance=instance,
            resources=resources,
            run_config=QUIET,
        )
        report.run_ids.append(result.run_id)
        report.materialized += _materialized(result)
        report.checks += [
            CheckOutcome(
                e.asset_key.to_user_string(), e.check_name, e.passed, e.severity != AssetCheckSeverity.WARN
            )
            for e in result.get_asset_check_evaluations()
        ]
    write_record(store, experiment)
    return report


def _reuse_stored(report: ExperimentRun, store: ArtifactStore, step: Step, partition: str | None) -> bool:
    """Report ``step``'s complete output (and its checks, evaluated on it) as reused, as its run would;
    False when it is missing, or fails a blocking check: its run reports that, and blocks what follows."""
    artifact = store.get(step.key, step.version, partition)
    if artifact is None:
        return False
    checks = [
        CheckOutcome(step.name, name, check.fn(artifact)[0], check.blocking)
        for name, check in step.stage.checks.items()
    ]
    if any(c.blocking and not c.passed for c in checks):
        return False
    label = step.name + (f" [{partition}]" if partition else "")
    log.info(f"{label}: reused version {step.version} ({artifact.url}), no run needed")
    report.materialized.append(
        Materialized(step.name, partition, True, _plain(dagster_metadata(artifact, True)))
    )
    report.checks += checks
    return True


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
