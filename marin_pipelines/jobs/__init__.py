"""Jobs over an experiment's assets: per crawl snapshot, the corpus pipeline, the ladder, the law.

``jobs/snapshots.py`` adds the sensor that processes new crawl snapshots and the schedule that
refreshes the corpus-level stages over all of them.
"""

from dagster import AssetSelection, define_asset_job
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from marin_pipelines.experiment import STAGES, Experiment

LADDER_STAGES = ("ladder_checkpoint", "ladder_eval_results")
# The main run is the ladder's preregistered target: it runs after its prediction is recorded.
TARGET_STAGES = ("checkpoint", "eval_results")
SCALING_STAGES = ("scaling_prediction", "scaling_law")
Job = UnresolvedAssetJobDefinition  # what define_asset_job makes
SNAPSHOT_STAGES = tuple(name for name, stage in STAGES.items() if stage.per_snapshot)


def ladder_selection(experiment: Experiment) -> AssetSelection:
    return AssetSelection.assets(*[[experiment.name, stage] for stage in LADDER_STAGES])


def snapshot_selection(experiment: Experiment) -> AssetSelection:
    """The per-document stages, partitioned by crawl snapshot: crawl -> deduplicated_text."""
    return AssetSelection.assets(*[[experiment.name, stage] for stage in SNAPSHOT_STAGES])


def stages_selection(experiment: Experiment, *stages: str) -> AssetSelection:
    """The experiment's assets for ``stages``, with their checks."""
    return AssetSelection.assets(*[[experiment.name, stage] for stage in stages])


def pipeline_selection(experiment: Experiment) -> AssetSelection:
    """Every unpartitioned asset up to the tokens: the ladder, the prediction and the main run follow."""
    everything = AssetSelection.key_prefixes([experiment.name])
    later = stages_selection(experiment, *TARGET_STAGES, *SCALING_STAGES)
    return everything - snapshot_selection(experiment) - ladder_selection(experiment) - later


def experiment_jobs(experiment: Experiment) -> list[Job]:
    name = experiment.name
    return [
        define_asset_job(
            f"{name}_snapshot",
            selection=snapshot_selection(experiment),
            description="One crawl snapshot from WARC files to deduplicated text (a partition per snapshot).",
        ),
        define_asset_job(
            f"{name}_pipeline",
            selection=pipeline_selection(experiment),
            description="All processed snapshots to curated text and tokens.",
        ),
        define_asset_job(
            f"{name}_ladder",
            selection=ladder_selection(experiment),
            description="One scaling-ladder run; backfill all partitions to run the ladder.",
        ),
        define_asset_job(
            f"{name}_prediction",
            selection=stages_selection(experiment, "scaling_prediction"),
            description="Fit the complete ladder and preregister the main run's loss, before it runs.",
        ),
        define_asset_job(
            f"{name}_target",
            selection=stages_selection(experiment, *TARGET_STAGES),
            description="The main run and its evaluation; a check compares it with the preregistered loss.",
        ),
        define_asset_job(
            f"{name}_scaling_law",
            selection=stages_selection(experiment, "scaling_law"),
            description="The ladder's fit with the main run's prediction and actual loss.",
        ),
    ]
