"""Jobs and automation over the step assets.

- Per crawl step: ``{crawl}_snapshot`` runs one snapshot from WARC files to deduplicated text, and the
  ``{crawl}_new_snapshots`` sensor adds each new snapshot folder as a partition and requests that run.
  Cross-snapshot dedup needs earlier snapshots first: every step over a crawl's snapshots is in the
  crawl's concurrency pool (``step_assets.crawl_pool``), so the run queue starts those runs one at a time
  in the order queued, whoever queued them (this sensor, the job, a backfill, the refresh schedule).
- Per experiment: ``{experiment}_pipeline`` materialises its unpartitioned steps up to any ladder, and
  the ``{experiment}_refresh`` schedule runs it daily (everything is reused when no snapshot arrived);
  ``{experiment}_after_ladders`` runs what follows its ladders by hand (the command line runs it).
  These two kinds of job process documents: their runs carry ``data_tags`` (on Kubernetes, the size of
  the run pod: ``launcher_env.data_run_tags``).
- Per ladder: ``{ladder}_ladder`` runs one rung; backfill its partitions. What is downstream of a ladder
  (the prediction, the target it predicts, its evaluation, the law) rolls forward by declarative
  automation (eager) once the backfill is complete; the target's edge from its prediction keeps the order.

Every job's runs are tagged with what they are for (``run_tags``): ``marin/experiment`` (where one
experiment owns the job's steps), ``marin/crawl`` or ``marin/ladder``; the rung or snapshot is Dagster's own
``dagster/partition`` tag. The command line runs each part of an experiment through these same jobs, so
its runs list under them in the UI.
"""

from __future__ import annotations

from collections.abc import Iterable

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    schedule,
    sensor,
)

from marin_pipelines.defs.step_assets import asset_key, slug, snapshot_partitions
from marin_pipelines.experiment import Experiment
from marin_pipelines.steps import Step

REFRESH_CRON = "0 4 * * *"  # daily at 04:00
SENSOR_INTERVAL_SECONDS = 300
EXPERIMENT_RUN_TAG, CRAWL_RUN_TAG, LADDER_RUN_TAG = "marin/experiment", "marin/crawl", "marin/ladder"


def snapshot_job(crawl: Step) -> str:
    return f"{slug(crawl)}_snapshot"


def ladder_job(ladder: Step) -> str:
    return f"{slug(ladder)}_runs"


def pipeline_job(experiment: Experiment) -> str:
    return f"{experiment.name}_pipeline"


def after_ladders_job(experiment: Experiment) -> str:
    return f"{experiment.name}_after_ladders"


def run_tags(experiments: Iterable[Experiment], source: Step | None = None) -> dict[str, str]:
    """The tags of a job's runs: the crawl or ladder it partitions (``source``), and the experiment when
    exactly one of ``experiments`` declares it (a step shared by several lists each on its asset)."""
    owners = [e.name for e in experiments if source is None or source in e.all_steps]
    tags = {EXPERIMENT_RUN_TAG: owners[0]} if len(owners) == 1 else {}
    if source is not None:
        tags[CRAWL_RUN_TAG if source.partitioning == "snapshot" else LADDER_RUN_TAG] = source.name
    return tags


def selection(steps: Iterable[Step]) -> AssetSelection:
    return AssetSelection.assets(*[asset_key(step) for step in steps])


def partitioned_by(steps: Iterable[Step], source: Step) -> list[Step]:
    return [step for step in steps if step.partition_source is source]


def partition_sources(steps: Iterable[Step], kind: str) -> list[Step]:
    """The crawl (or ladder) steps whose partitions some of ``steps`` have, once each, in order: each after
    the sources its steps read whole (a corpus's dedup against a crawl's comes after that crawl's)."""
    steps = list(steps)
    found = {id(s.partition_source): s.partition_source for s in steps if s.partitioning == kind}
    needs = {
        key: {
            id(s.inputs[name].partition_source)
            for s in partitioned_by(steps, source)
            for name in s.whole_inputs
            if s.inputs[name].partitioning == kind
        }
        for key, source in found.items()
    }
    ordered: list[Step] = []
    while len(ordered) < len(found):
        placed = {id(s) for s in ordered}
        ready = [found[k] for k in found if k not in placed and needs[k] <= placed | {k}]
        if not ready:
            left = sorted(s.name for k, s in found.items() if k not in placed)
            raise ValueError(f"the partition sources {left} read each other's partitions whole: no order")
        ordered.append(ready[0])
    return ordered


def after_ladders(steps: list[Step]) -> set[int]:
    """Ids of the unpartitioned steps downstream of a ladder: declarative automation moves them on."""
    out: set[int] = set()
    for step in steps:  # topological order
        upstream = (*step.inputs.values(), *step.after)
        if step.partitioning is None and any(u.partitioning == "ladder" or id(u) in out for u in upstream):
            out.add(id(step))
    return out


def pipeline_steps(experiment: Experiment) -> list[Step]:
    later = after_ladders(experiment.all_steps)
    return [s for s in experiment.all_steps if s.partitioning is None and id(s) not in later]


def after_ladder_steps(experiment: Experiment) -> list[Step]:
    later = after_ladders(experiment.all_steps)
    return [s for s in experiment.all_steps if id(s) in later]


def snapshot_sensor(crawl: Step, job_name: str) -> SensorDefinition:
    partitions = snapshot_partitions(crawl)

    @sensor(
        name=f"{slug(crawl)}_new_snapshots",
        job_name=job_name,
        minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
        default_status=DefaultSensorStatus.STOPPED,
        description="Adds each new snapshot folder under the crawl root as a partition and processes it.",
    )
    def new_snapshots(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        try:
            found = crawl.partition_keys(strict=True)
        except (FileNotFoundError, ValueError) as error:
            return SkipReason(f"crawl root unreadable: {error}")
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [snapshot for snapshot in found if snapshot not in known]
        if not new:
            root = crawl.config.warc_root or "demo"  # type: ignore[attr-defined]
            return SkipReason(f"no new snapshot among {len(found)} under {root}")
        return SensorResult(
            run_requests=[RunRequest(run_key=snapshot, partition_key=snapshot) for snapshot in new],
            dynamic_partitions_requests=[partitions.build_add_request(new)],
        )

    return new_snapshots


def refresh_schedule(experiment: Experiment, job_name: str, crawls: list[Step]) -> ScheduleDefinition:
    @schedule(
        name=f"{experiment.name}_refresh",
        job_name=job_name,
        cron_schedule=REFRESH_CRON,
        default_status=DefaultScheduleStatus.STOPPED,
        description="Rebuilds what reads every crawl snapshot (curation, tokens, runs) over those processed.",
    )
    def refresh(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        if not all(context.instance.get_dynamic_partitions(snapshot_partitions(c).name) for c in crawls):
            return SkipReason("no crawl snapshot yet: the new-snapshot sensor adds them")
        return RunRequest()  # in its crawls' pools: queued behind the snapshot runs

    return refresh


def automation(
    experiments: list[Experiment], steps: list[Step], data_tags: dict[str, str] | None = None
) -> dict[str, list]:
    """Jobs, sensors and schedules for the steps of ``experiments`` (each crawl and ladder once);
    ``data_tags`` go on the runs of the jobs that process documents."""
    jobs, sensors, schedules = [], [], []
    for crawl in partition_sources(steps, "snapshot"):
        jobs.append(
            define_asset_job(
                snapshot_job(crawl),
                selection=selection(partitioned_by(steps, crawl)),
                description=f"One snapshot of {crawl.name}: WARC files to deduplicated text.",
                tags={**run_tags(experiments, crawl), **(data_tags or {})},
            )
        )
        sensors.append(snapshot_sensor(crawl, snapshot_job(crawl)))
    for ladder in partition_sources(steps, "ladder"):
        jobs.append(
            define_asset_job(
                ladder_job(ladder),
                selection=selection(partitioned_by(steps, ladder)),
                description="One scaling-ladder rung and its evaluation; backfill every partition to run the "
                "ladder. Its prediction, the target run and the law follow by themselves.",
                tags=run_tags(experiments, ladder),
            )
        )
    for experiment in experiments:
        jobs.append(
            define_asset_job(
                pipeline_job(experiment),
                selection=selection(pipeline_steps(experiment)),
                description=f"{experiment.name}: every step over all processed snapshots, up to any ladder.",
                tags={**run_tags([experiment]), **(data_tags or {})},
            )
        )
        if later := after_ladder_steps(experiment):
            jobs.append(
                define_asset_job(
                    after_ladders_job(experiment),
                    selection=selection(later),
                    description=f"{experiment.name}: what follows its ladders (the prediction, the target "
                    "it predicts, their evaluations, the law). Declarative automation runs these once a "
                    "ladder's backfill is complete; this job runs them by hand.",
                    tags=run_tags([experiment]),
                )
            )
        crawls = partition_sources(experiment.all_steps, "snapshot")
        if crawls:
            schedules.append(refresh_schedule(experiment, pipeline_job(experiment), crawls))
    return {"jobs": jobs, "sensors": sensors, "schedules": schedules}
