"""Materialise a whole experiment in this process: the pipeline, every ladder partition, the law.

This is what `make demo` and the end-to-end tests run; the UI runs the same assets through jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dagster import AssetSelection, DagsterInstance, ExecuteInProcessResult, materialize

from marin_pipelines.assets import experiment_assets
from marin_pipelines.assets.train import ladder_partitions
from marin_pipelines.experiment import Experiment
from marin_pipelines.jobs import ladder_selection, pipeline_selection
from marin_pipelines.resources import default_resources

INFO_LOGS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


@dataclass
class Materialized:
    """One asset (partition) materialised by a run, and whether its output was reused."""

    asset: str
    partition: str | None
    reused: bool
    metadata: dict = field(default_factory=dict)


def materialize_experiment(
    experiment: Experiment,
    store_root: str | None = None,
    instance: DagsterInstance | None = None,
    on_asset: Callable[[Materialized], None] = lambda m: None,
) -> list[Materialized]:
    """Run the pipeline, then each ladder partition, then the scaling law; stop at the first failure."""
    assets = experiment_assets(experiment)
    resources = default_resources(store_root)
    runs: list[tuple[AssetSelection, str | None]] = [(pipeline_selection(experiment), None)]
    runs += [
        (ladder_selection(experiment), key) for key in ladder_partitions(experiment).get_partition_keys()
    ]
    runs.append((AssetSelection.assets([experiment.name, "scaling_law"]), None))
    done: list[Materialized] = []
    for selection, partition in runs:
        result = materialize(
            assets,
            selection=selection,
            partition_key=partition,
            instance=instance,
            resources=resources,
            run_config=INFO_LOGS,
        )
        for m in _materialized(result):
            on_asset(m)
            done.append(m)
    return done


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
