"""What a launched sweep is told (``marin_pipelines/launch_config.py``): ``run_sweep``'s arguments."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from marin_pipelines.launch_config import LaunchConfig
from marin_pipelines.sweeps.settings import SweepSettings
from marin_pipelines.train.run_config import RunConfig


class SweepLaunch(LaunchConfig):
    """A sweep of ``space`` over the run ``base`` on the token cache ``data``, in its folder ``out`` (the
    study, the trials' run folders, the table, ``best.json`` and ``summary.json``); it continues the study
    found there."""

    command: ClassVar[str] = "sweep"
    file_name: ClassVar[str] = "sweep_launch.json"

    base: RunConfig = Field(description="the base run, every trial's config before the space's parameters")
    data: str = Field(description="a tokenized_cache output: a folder or a gs:// URL")
    space: dict[str, Any] = Field(
        description="dotted fields of the run config -> {low, high, log, step, int, grid} or [choices]"
    )
    settings: SweepSettings = Field(description="the search: trials, sampler, pruner, metric and seed")
    storage: str | None = Field(
        None,
        description="where the study lives: a database URL or a journal file (copied into out when the "
        "sweep ends); None: out's journal file",
    )
    workers: int = Field(1, ge=1, description="local processes training trials at once")
    progress: bool = Field(True, description="a progress line a trial on stderr")

    def arguments(self) -> dict[str, Any]:
        """``run_sweep``'s arguments."""
        fields = ("base", "data", "space", "settings", "out", "storage", "workers", "progress")
        return {name: getattr(self, name) for name in fields}
