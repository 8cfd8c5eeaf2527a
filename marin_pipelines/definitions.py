"""The Definitions object: every experiment's assets, the store resources and the jobs."""

from dagster import Definitions

from marin_pipelines.assets import experiment_assets
from marin_pipelines.experiments.datashop import datashop
from marin_pipelines.experiments.demo import demo
from marin_pipelines.jobs import experiment_jobs
from marin_pipelines.resources import default_resources

EXPERIMENTS = [demo(), datashop()]

defs = Definitions(
    assets=[a for experiment in EXPERIMENTS for a in experiment_assets(experiment)],
    jobs=[j for experiment in EXPERIMENTS for j in experiment_jobs(experiment)],
    resources=default_resources(),
)
