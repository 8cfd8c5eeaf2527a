"""The Dagster layer: thin assets over the core library, one module per area."""

from dagster import AssetsDefinition

from marin_pipelines.assets.crawl import crawl_assets
from marin_pipelines.assets.evals import eval_assets
from marin_pipelines.assets.quality import quality_assets
from marin_pipelines.assets.scaling import scaling_assets
from marin_pipelines.assets.text import text_assets
from marin_pipelines.assets.tokenize import tokenize_assets
from marin_pipelines.assets.train import train_assets
from marin_pipelines.experiment import Experiment

FACTORIES = (
    crawl_assets,
    text_assets,
    quality_assets,
    tokenize_assets,
    train_assets,
    eval_assets,
    scaling_assets,
)


def experiment_assets(experiment: Experiment) -> list[AssetsDefinition]:
    """The whole asset graph of one experiment, keyed under its name."""
    return [asset for factory in FACTORIES for asset in factory(experiment)]
