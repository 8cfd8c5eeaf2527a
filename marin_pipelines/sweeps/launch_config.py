"""What a launched sweep is told (``marin_pipelines/launch_config.py``): ``run_sweep``'s arguments, or the one
trial of the sweep to finish (``run_one``)."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pydantic import Field, model_validator

from marin_pipelines.launch_config import LaunchConfig
from marin_pipelines.sweeps.settings import SweepSettings
from marin_pipelines.train.run_config import RunConfig


class SweepLaunch(LaunchConfig):
    """A sweep of ``space`` over the run ``base`` on the token cache ``data``, in its folder ``out`` (the
    study, the trials' run folders, the table, ``best.json`` and ``summary.json``); it continues the study
    found there. With ``trial``, that one trial is finished instead (a trial's partition materialised alone),
    from a file of its own: ``trial_NNNN_launch.json``."""

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
    storage_from: str | None = Field(
        None,
        description="an environment variable holding the storage's database URL, in place of storage: the "
        "URL (its password) is kept out of this file, which the output keeps; the launcher hands it on",
    )
    workers: int = Field(1, ge=1, description="local processes training trials at once")
    progress: bool = Field(True, description="a progress line a trial on stderr")
    trial: int | None = Field(
        None,
        ge=0,
        description="one trial to finish in place of the sweep: resumed where its run ended, waited for "
        "where another trains it, trained again where it failed; its rows go to trial_NNNN.json in out",
    )

    @model_validator(mode="after")
    def _one_storage(self) -> SweepLaunch:
        if self.storage is not None and self.storage_from is not None:
            raise ValueError("storage and storage_from: one or the other")
        return self

    @property
    def file(self) -> str:
        """The sweep's file, or one trial's: a trial finished beside the sweep leaves the sweep's as it is."""
        if self.trial is None:
            return super().file
        return f"{self.folder}/trial_{self.trial:04d}_launch.json"

    def arguments(self) -> dict[str, Any]:
        """``run_sweep``'s arguments."""
        fields = ("base", "data", "space", "settings", "out", "workers", "progress")
        return {**{name: getattr(self, name) for name in fields}, "storage": self.storage_url()}

    def storage_url(self) -> str | None:
        """``storage``, or the URL the variable ``storage_from`` holds."""
        if self.storage_from is None:
            return self.storage
        if not (url := os.environ.get(self.storage_from)):
            raise ValueError(f"{self.file}: the study's database URL is in ${self.storage_from}: not set")
        return url

    def env(self) -> dict[str, str]:
        """What the launched process needs in its environment besides the file: ``storage_from``'s URL."""
        return {} if self.storage_from is None else {self.storage_from: str(self.storage_url())}
