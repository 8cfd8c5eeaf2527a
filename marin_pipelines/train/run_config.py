"""A training run as a file: the model (a named size, overridable, or a shape), TrainConfig, data mixture.

This is what ``marin-pipelines train --config FILE`` reads and what the checkpoint assets hand the launched
child (inside its ``TrainLaunch``), so a run on a laptop and a run in a pod start from the same config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from marin_pipelines.config_errors import describe, field_problems
from marin_pipelines.store import read_url
from marin_pipelines.tokenize.data_mixture import MixtureConfig
from marin_pipelines.train.model import MODEL_SIZES, LlamaConfig
from marin_pipelines.train.train_config import TrainConfig


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
        try:
            return LlamaConfig(**{**(MODEL_SIZES[size] if size else {}), **spec})
        except ValidationError as e:
            raise ValueError(describe(e, LlamaConfig, "model", ("model",))) from None


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate a YAML run config (a path or URL); errors name the file and each bad field."""
    return validate_run_config(read_yaml(path, "training config"), f"training config {path}")


def read_yaml(path: str | Path, what: str) -> Any:
    """A YAML file (a path or URL) as data ({} when empty); errors name ``what`` and the file, and where in it
    the YAML breaks."""
    try:
        text = read_url(str(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"no such {what} file: {path}") from None
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or e
        raise ValueError(f"{what} {path} is not valid YAML{where}: {problem}") from None


def validate_run_config(data: Any, what: str) -> RunConfig:
    """``data`` as a run config; else a ValueError naming ``what`` and each bad field (its model's first)."""
    problems = model_problems(data.get("model")) if isinstance(data, dict) else []
    try:
        run = RunConfig.model_validate(data)
    except ValidationError as e:
        problems += field_problems(e, RunConfig)
    if problems:
        listed = f" {problems[0]}" if len(problems) == 1 else "\n" + "\n".join(f"  {p}" for p in problems)
        raise ValueError(f"invalid {what}:{listed}")
    return run


def model_problems(spec: Any) -> list[str]:
    """What is wrong with a config's ``model`` (a size and overrides, or a whole shape), checked before any
    data is read: an unknown size, an unknown field, a bad value. Its vocab_size may come from the data."""
    if not isinstance(spec, dict):
        return []  # RunConfig's own validation says what model must be
    spec = dict(spec)
    size = spec.pop("size", None)
    problems = []
    if size is not None and size not in MODEL_SIZES:
        problems.append(f"model.size: unknown model size {size!r}; choose one of {sorted(MODEL_SIZES)}")
    known = ["size", *LlamaConfig.model_fields]
    problems += [
        f"model.{name}: unknown field; allowed: {', '.join(known)}" for name in spec if name not in known
    ]
    shape = {name: value for name, value in spec.items() if name in known}
    preset = MODEL_SIZES.get(size, MODEL_SIZES["nano"]) if size is not None else {}
    try:  # an unknown size: the given fields over a stand-in shape, whose own errors are not reported
        LlamaConfig(**{"vocab_size": 1, **preset, **shape})
    except ValidationError as e:
        if size is None or size in MODEL_SIZES:
            problems += field_problems(e, LlamaConfig, ("model",))
        else:
            given = [err for err in e.errors() if err["loc"] and err["loc"][0] in shape]
            problems += field_problems(
                ValidationError.from_exception_data(e.title, given), LlamaConfig, ("model",)
            )
    return problems
