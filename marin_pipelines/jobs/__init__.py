"""Jobs over an experiment's assets: the pipeline (unpartitioned) and the ladder (partitioned)."""

from dagster import AssetSelection, define_asset_job

from marin_pipelines.experiment import Experiment

LADDER_STAGES = ("ladder_checkpoint", "ladder_eval_results")


def ladder_selection(experiment: Experiment) -> AssetSelection:
    return AssetSelection.assets(*[[experiment.name, stage] for stage in LADDER_STAGES])


def pipeline_selection(experiment: Experiment) -> AssetSelection:
    """Every unpartitioned asset but the scaling law, which waits for the whole ladder."""
    everything = AssetSelection.key_prefixes([experiment.name])
    return everything - ladder_selection(experiment) - AssetSelection.assets([experiment.name, "scaling_law"])


def experiment_jobs(experiment: Experiment) -> list:
    name = experiment.name
    return [
        define_asset_job(
            f"{name}_pipeline",
            selection=pipeline_selection(experiment),
            description="Crawl to evaluated checkpoint.",
        ),
        define_asset_job(
            f"{name}_ladder",
            selection=ladder_selection(experiment),
            description="One scaling-ladder run; backfill all partitions to run the ladder.",
        ),
        define_asset_job(
            f"{name}_scaling_law",
            selection=AssetSelection.assets([name, "scaling_law"]),
            description="Fit the scaling law once the ladder is complete.",
        ),
    ]
