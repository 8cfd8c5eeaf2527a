"""What a launched evaluation is told (``marin_pipelines/launch_config.py``)."""

from __future__ import annotations

import posixpath
from typing import ClassVar, Self

from pydantic import Field, model_validator

from marin_pipelines.evals.checkpoint_eval import EvalConfig, with_heldout
from marin_pipelines.evals.eval_results import EVAL_BATCH_SIZE
from marin_pipelines.launch_config import LaunchConfig


class EvalLaunch(LaunchConfig):
    """A checkpoint's evaluation on ``bpb`` (name -> caches / text) and ``evals``' sets and tasks, written to
    the results file ``out``."""

    command: ClassVar[str] = "eval"
    file_name: ClassVar[str] = "eval_launch.json"

    checkpoint: str = Field(description="a folder (or URL) written by training")
    tokenizer: str | None = Field(None, description="tokenizer.json; None: the one beside the checkpoint")
    bpb: dict[str, list[str]] = Field(default_factory=dict, description="bits-per-byte sets besides evals'")
    evals: EvalConfig = EvalConfig()
    chat_template: str | None = Field(None, description="Jinja; None: the checkpoint's own, else the default")
    batch_size: int = Field(EVAL_BATCH_SIZE, ge=1)

    @model_validator(mode="after")
    def _sets(self) -> Self:
        if not (self.bpb or self.evals.heldout or self.evals.tasks or self.evals.chat):
            raise ValueError("nothing to evaluate: no bits-per-byte set, held-out set, task or chat set")
        with_heldout(self.bpb, self.evals)  # a held-out set named like a bpb set is refused before launching
        return self

    @property
    def folder(self) -> str:
        """The results file's folder."""
        return posixpath.dirname(self.out) or "."
