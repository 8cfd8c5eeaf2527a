"""New crawl snapshots become partitions (a sensor); the corpus built on them is refreshed (a schedule).

The sensor lists the crawl root's snapshot folders (``crawl/snapshots.py``), adds the new ones as
partitions of ``{experiment}_crawl_snapshot`` and requests one ``{experiment}_snapshot`` run for each,
in key order. The schedule runs ``{experiment}_pipeline`` (quality, curation, tokens, training,
evaluation over every snapshot) periodically: when no snapshot arrived since the last run, every
output is reused, since those stages' versions cover the set of snapshots.

Cross-snapshot dedup needs the earlier snapshots done first, so these runs carry ``QUEUE_TAG``, which
``dagster.yaml`` limits to one run at a time: the run queue then starts them in the order requested.
"""

from __future__ import annotations

from dagster import (
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    schedule,
    sensor,
)

from marin_pipelines.assets.crawl import snapshot_partitions
from marin_pipelines.experiment import Experiment
from marin_pipelines.jobs import Job

QUEUE_TAG = "marin/crawl_queue"
REFRESH_CRON = "0 4 * * *"  # daily at 04:00
SENSOR_INTERVAL_SECONDS = 300


def snapshot_sensor(experiment: Experiment, job: Job) -> SensorDefinition:
    partitions = snapshot_partitions(experiment)

    @sensor(
        name=f"{experiment.name}_new_snapshots",
        job=job,
        minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
        default_status=DefaultSensorStatus.STOPPED,
        description="Adds each new snapshot folder under the crawl root as a partition and processes it.",
    )
    def new_snapshots(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        try:
            found = experiment.snapshots
        except (FileNotFoundError, ValueError) as error:
            return SkipReason(f"crawl root unreadable: {error}")
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [snapshot for snapshot in found if snapshot not in known]
        if not new:
            return SkipReason(
                f"no new snapshot among {len(found)} under {experiment.crawl.warc_root or 'demo'}"
            )
        return SensorResult(
            run_requests=[
                RunRequest(run_key=snapshot, partition_key=snapshot, tags={QUEUE_TAG: experiment.name})
                for snapshot in new
            ],
            dynamic_partitions_requests=[partitions.build_add_request(new)],
        )

    return new_snapshots


def refresh_schedule(experiment: Experiment, job: Job) -> ScheduleDefinition:
    partitions = snapshot_partitions(experiment)

    @schedule(
        name=f"{experiment.name}_refresh",
        job=job,
        cron_schedule=REFRESH_CRON,
        default_status=DefaultScheduleStatus.STOPPED,
        description="Rebuilds curated text, tokens and checkpoint over every processed crawl snapshot.",
    )
    def refresh(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        if not context.instance.get_dynamic_partitions(partitions.name):
            return SkipReason("no crawl snapshot yet: the new-snapshot sensor adds them")
        return RunRequest(tags={QUEUE_TAG: experiment.name})  # queued behind the snapshot runs

    return refresh


def experiment_automation(
    experiment: Experiment, jobs: list[Job]
) -> tuple[list[SensorDefinition], list[ScheduleDefinition]]:
    """The sensor and schedule of an experiment, on its snapshot and pipeline jobs."""
    by_name = {job.name: job for job in jobs}
    return (
        [snapshot_sensor(experiment, by_name[f"{experiment.name}_snapshot"])],
        [refresh_schedule(experiment, by_name[f"{experiment.name}_pipeline"])],
    )
