"""Dumps of existing corpora made from installed text (``crawl/dataset_dumps.py``): what a ``corpus`` step
reads when an experiment starts from "a dataset somebody already made" without downloading one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from marin_pipelines.crawl.dataset_dumps import write_dumps
from marin_pipelines.crawl.package_text import PackageTextConfig
from marin_pipelines.evals.evaluation_items import evaluation_items
from marin_pipelines.stages.package_text import installed_versions
from marin_pipelines.steps import InputError, StepContext, stage
from marin_pipelines.store import PendingArtifact

MODULES = (  # side-effect-free standard modules with much prose in their docstrings
    "argparse", "bisect", "collections", "csv", "datetime", "difflib", "functools", "heapq", "itertools",
    "json", "logging", "os", "pathlib", "random", "re", "shlex", "shutil", "statistics", "string",
    "subprocess", "tempfile", "textwrap", "typing", "unittest", "urllib.parse", "zipfile",
)  # fmt: skip


class DumpsConfig(BaseModel):
    """Which installed text goes into the dumps, and which evaluation items are planted into them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    modules: list[str] = Field(list(MODULES), min_length=1, description="standard modules for the docstrings")
    distributions: list[str] = Field(min_length=1, description="installed distributions for the docs dump")
    plant_tasks: list[str] = Field(default_factory=list, description="lm-eval tasks whose items are planted")
    plant_per_task: int = Field(2, ge=0, description="items planted per task (13 words or more each)")


def installed_text(config: DumpsConfig) -> dict[str, Any]:
    """The installed versions the dumps are made of (the same check as ``package_text``'s)."""
    return installed_versions(PackageTextConfig(distributions=tuple(config.distributions)))


# revision 2: the planted items are named in the metadata
@stage(DumpsConfig, revision=2, kinds=("parquet", "json"), fingerprint=installed_text)
def dataset_dumps(ctx: StepContext, out: PendingArtifact, config: DumpsConfig) -> None:
    """The standard library's docstrings as parquet and installed packages' documentation as gzipped JSON
    lines, each with field names of its own, with a few evaluation items planted into the documentation."""
    items = evaluation_items(config.plant_tasks) if config.plant_tasks else []
    planted = {
        f"{item.suite}/{item.item}": item.text
        for task in config.plant_tasks
        for item in [i for i in items if i.suite == task and len(i.text.split()) >= 13][
            : config.plant_per_task
        ]
    }
    try:
        out.metadata.update(write_dumps(config.modules, config.distributions, planted, out.path))
    except (ModuleNotFoundError, ValueError) as e:
        raise InputError(f"{ctx.step.name}: {e}") from None
