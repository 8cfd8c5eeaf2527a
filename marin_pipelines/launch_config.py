"""What a launched child is told: one JSON file, written by the launcher from the step's typed config and
read by ``python -m marin_pipelines.cli train|sft|eval --step-config FILE``.

The file holds everything the child needs (``train/launch_config.py``, ``evals/launch_config.py``), so that
no command line is built in one place and parsed in another. It lives beside the child's output, in the
store: a pod on another machine reads it from there, and every process of a multi-host run reads the same
one. ``--step-config`` is a flag of its own, apart from the commands' user-facing flags (``train --config``
is a run's YAML, not a step's file). This module loads no JAX: the command line's parsers name the flag.
"""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

CHILD_MODULE = "marin_pipelines.cli"  # ``python -m`` it: an image needs no console script
STEP_CONFIG_FLAG = "--step-config"


class LaunchConfig(BaseModel):
    """One launched child's config: the command that reads it and where its file goes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: ClassVar[str]  # the ``marin-pipelines`` command that runs it
    file_name: ClassVar[str]

    out: str = Field(description="the child's output: a run folder, or the results file of an evaluation")

    @property
    def folder(self) -> str:
        """Where the file is written: the output folder (a URL stays one)."""
        return self.out.rstrip("/")

    @property
    def file(self) -> str:
        return f"{self.folder}/{self.file_name}"

    def write(self) -> list[str]:
        """Write the file; the arguments of ``python`` that run the child on it."""
        from marin_pipelines.store import write_url

        write_url(self.file, self.model_dump_json(indent=2))
        return ["-m", CHILD_MODULE, self.command, STEP_CONFIG_FLAG, self.file]

    @classmethod
    def read(cls, url: str) -> Self:
        """The file at ``url``; a bad one is an error naming it and each bad field."""
        from marin_pipelines.config_errors import describe
        from marin_pipelines.store import read_url

        try:
            return cls.model_validate_json(read_url(url))
        except ValidationError as e:
            raise ValueError(f"{url}: {describe(e, cls, cls.command)}") from None
