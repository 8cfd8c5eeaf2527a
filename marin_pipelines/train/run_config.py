"""A training run as a file: the model (a named size, overridable, or a shape), TrainConfig, data mixture.

This is what ``marin-pipelines train --config FILE`` reads and what the checkpoint assets write for
the launcher, so a run on a laptop and a run in a pod start from the same YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from marin_pipelines.store import read_url, write_url
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.train.checkpoint import TrainConfig
from marin_pipelines.train.model import MODEL_SIZES, LlamaConfig


class RunConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: dict[str, Any] = Field(
        description="LlamaConfig fields; `size: NAME` takes MODEL_SIZES[NAME], other keys override it"
    )
    train: TrainConfig = TrainConfig()
    data: MixtureConfig = Field(MixtureConfig(), description="token caches and weights; default: all --data")

    def llama(self, vocab_size: int) -> LlamaConfig:
        """The model for ``vocab_size`` token ids (a larger ``model.vocab_size`` is allowed: padding)."""
        spec = dict(self.model)
        size = spec.pop("size", None)
        if size is not None and size not in MODEL_SIZES:
            raise ValueError(f"model.size {size!r} is not one of {sorted(MODEL_SIZES)}")
        spec.setdefault("vocab_size", vocab_size)
        if spec["vocab_size"] < vocab_size:
            raise ValueError(
                f"model.vocab_size ({spec['vocab_size']}) is below the data's vocab ({vocab_size})"
            )
        return LlamaConfig(**{**(MODEL_SIZES[size] if size else {}), **spec})

    def dump(self, path: str | Path) -> None:
        """Write the YAML to a local path or a URL (``gs://``: beside a run's checkpoints)."""
        write_url(str(path), yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate a YAML run config (a path or URL); errors name the file and each bad field."""
    try:
        text = read_url(str(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"no such config file: {path}") from None
    try:
        return RunConfig.model_validate(yaml.safe_load(text) or {})
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ValueError(f"invalid training config {path}: {problems}") from None
