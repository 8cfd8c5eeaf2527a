"""What a launched training or fine-tuning child is told (``marin_pipelines/launch_config.py``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from marin_pipelines.launch_config import LaunchConfig
from marin_pipelines.train.run_config import RunConfig
from marin_pipelines.train.train_config import TrainConfig


class TrainingLaunch(LaunchConfig):
    """A run that trains (one process per host of a multi-host launch); it resumes in its folder ``out``."""

    progress_bar: bool = Field(False, description="set by the launcher: where someone watches a terminal")


class TrainLaunch(TrainingLaunch):
    """A training run: the run config and its token cache."""

    command: ClassVar[str] = "train"
    file_name: ClassVar[str] = "train_launch.json"

    run: RunConfig
    data: str = Field(description="a tokenized_cache output: a folder or a gs:// URL")
    warm_start: str | None = Field(
        None,
        description="a training folder (or URL) whose latest checkpoint the run starts from (warm_start.py)",
    )
    warm_start_optimizer: bool = Field(
        True, description="with warm_start: load the base's optimiser state where it matches, else fresh"
    )
    warm_start_other_tokenizer: bool = Field(
        False,
        description="with warm_start: a base trained on another tokenizer, or with no tokenizer.json to "
        "compare, is meant (recorded in the run's warm_start); else it is refused",
    )


class SFTLaunch(TrainingLaunch):
    """A fine-tuning run of ``base`` on chat files, compared with it on ``heldout``."""

    command: ClassVar[str] = "sft"
    file_name: ClassVar[str] = "sft_launch.json"

    base: str = Field(description="the base run's folder (or URL), with its tokenizer")
    data: list[str] = Field(min_length=1, description='JSON-lines chat files: {"messages": [...]}')
    train: TrainConfig
    chat_template: str | None = Field(None, description="Jinja; None: marin-pipelines' default")
    heldout: list[str] = Field(default_factory=list, description="held-out chat files: base vs tuned loss")
