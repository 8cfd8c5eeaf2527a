"""Materialise a whole experiment in this process: every snapshot, the pipeline, the ladder, the law.

This is what `make demo` and the end-to-end tests run; the UI runs the same assets through jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dagster import AssetCheckSeverity, AssetSelection, DagsterInstance, ExecuteInProcessResult, materialize

from marin_pipelines.assets import experiment_assets
from marin_pipelines.assets.crawl import snapshot_partitions
from marin_pipelines.assets.train import ladder_partitions
from marin_pipelines.experiment import Experiment
from marin_pipelines.jobs import (
    TARGET_STAGES,
    ladder_selection,
    pipeline_selection,
    snapshot_selection,
    stages_selection,
)
from marin_pipelines.resources import default_resources

# Dagster's console logger would print a failed step's whole traceback; the caller gets the error instead.
# After the ladder: the prediction is recorded before the run it predicts starts.
PREREGISTERED_ORDER = (("scaling_prediction",), TARGET_STAGES, ("scaling_law",))
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass
class Materialized:
    """One asset (partition) materialised by a run, and whether its output was reused."""

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


def materialize_experiment(
    experiment: Experiment,
    store_root: str | None = None,
    instance: DagsterInstance | None = None,
    through: str | None = None,
    resources: dict[str, Any] | None = None,
) -> ExperimentRun:
    """Run each crawl snapshot in order, the pipeline, each ladder partition, the preregistered
    prediction, the main run it predicts, then the scaling law.

    Stops at the first failure. The snapshots become dynamic partitions of ``instance``, which every
    run shares (an ephemeral one by default), as the sensor adds them in the UI. With ``through``,
    only the snapshots and then the corpus stages up to that stage run.
    """
    assets = experiment_assets(experiment)
    resources = resources or default_resources(store_root)
    instance = instance or DagsterInstance.ephemeral()
    snapshots = experiment.snapshots
    partitions = snapshot_partitions(experiment).name
    known = set(instance.get_dynamic_partitions(partitions))
    instance.add_dynamic_partitions(partitions, [s for s in snapshots if s not in known])
    runs: list[tuple[AssetSelection, str | None]] = [(snapshot_selection(experiment), s) for s in snapshots]
    if through is not None:
        upstream = AssetSelection.assets([experiment.name, through]).upstream()
        runs.append((upstream - snapshot_selection(experiment), None))
    else:
        runs.append((pipeline_selection(experiment), None))
        runs += [
            (ladder_selection(experiment), key) for key in ladder_partitions(experiment).get_partition_keys()
        ]
        runs += [(stages_selection(experiment, *stages), None) for stages in PREREGISTERED_ORDER]
    report = ExperimentRun()
    for selection, partition in runs:
        result = materialize(
            assets,
            selection=selection,
            partition_key=partition,
            instance=instance,
            resources=resources,
            run_config=QUIET,
        )
        report.materialized += _materialized(result)
        report.checks += [
            CheckOutcome(
                e.asset_key.to_user_string(), e.check_name, e.passed, e.severity != AssetCheckSeverity.WARN
            )
            for e in result.get_asset_check_evaluations()
        ]
    return report


def _materialized(result: ExecuteInProcessResult) -> list[Materialized]:
    out = []
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        metadata = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
        out.append(
            Materialized(
                mat.asset_key.to_user_string(), mat.partition, bool(metadata.get("reused")), metadata
            )
        )
    return out
