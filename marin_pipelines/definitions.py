"""The Definitions object: every experiment's assets, the store resources, jobs, sensors and schedules."""

from dagster import Definitions

from marin_pipelines.assets import experiment_assets
from marin_pipelines.experiments.datashop import datashop
from marin_pipelines.experiments.demo import demo
from marin_pipelines.jobs import experiment_jobs
from marin_pipelines.jobs.snapshots import experiment_automation
from marin_pipelines.resources import default_resources

EXPERIMENTS = [demo(), datashop()]

JOBS = {experiment.name: experiment_jobs(experiment) for experiment in EXPERIMENTS}
AUTOMATION = [experiment_automation(experiment, JOBS[experiment.name]) for experiment in EXPERIMENTS]

defs = Definitions(
    assets=[a for experiment in EXPERIMENTS for a in experiment_assets(experiment)],
    jobs=[job for jobs in JOBS.values() for job in jobs],
    sensors=[sensor for sensors, _ in AUTOMATION for sensor in sensors],
    schedules=[schedule for _, schedules in AUTOMATION for schedule in schedules],
    resources=default_resources(),
)
