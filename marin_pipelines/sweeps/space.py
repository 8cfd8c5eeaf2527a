"""A sweep's search space: dotted fields of a training run's config (``train.learning_rate``,
``model.d_model``) mapped to a range or a list of choices, checked against the base config before any trial
trains.

A range is ``{low, high}`` with ``log: true`` for a log scale, ``step`` for a linear grid, ``grid: [values]``
for the grid sampler's values, and ``int: true`` (or, where the config's field is not a float, integer bounds)
for integers; a list is the choices. A field the config does not have, an empty range, a log range from zero
or below, an empty choice list, or an end the config refuses (``train.learning_rate: {low: 0, ...}``) is an
error naming the field, raised when the space is read, not after the first trial's hour of training.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from marin_pipelines.config_errors import field_problems
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.run_config import RunConfig, read_yaml, validate_run_config

Choice = str | int | float | bool | None
RANGE_KEYS = ("low", "high", "log", "int", "step", "grid")


class RangeSpec(BaseModel):
    """A range as written in the space file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    low: StrictInt | StrictFloat
    high: StrictInt | StrictFloat
    log: bool = False
    integer: bool | None = Field(None, alias="int", description="integers; default: by the field's type")
    step: StrictInt | StrictFloat | None = Field(None, gt=0, description="values low, low + step, ... high")
    grid: list[StrictInt | StrictFloat] | None = Field(None, description="the grid sampler's values")


@dataclass(frozen=True)
class Param:
    """One searched field: a range of numbers or a list of choices."""

    name: str
    distribution: BaseDistribution
    grid: tuple[Choice, ...] | None  # the grid sampler's values; None: none given for a float range

    def describe(self) -> dict[str, Any]:
        """What the sweep's identity records of it (in words of its own, whatever Optuna's classes hold)."""
        dist = self.distribution
        if isinstance(dist, CategoricalDistribution):
            return {"choices": list(dist.choices)}
        assert isinstance(dist, FloatDistribution | IntDistribution)
        kind = "int" if isinstance(dist, IntDistribution) else "float"
        return {kind: [dist.low, dist.high], "log": dist.log, "step": dist.step, "grid": self.grid}


@dataclass(frozen=True)
class SearchSpace:
    """The searched fields, in the order given."""

    params: tuple[Param, ...]

    @classmethod
    def parse(cls, space: Mapping[str, Any], base: RunConfig) -> SearchSpace:
        """The space ``{dotted field: range or choices}`` over ``base``, every field and end checked."""
        if not isinstance(space, Mapping) or not space:
            raise ValueError("the search space is empty: map a dotted config field to {low, high} or a list")
        params = tuple(_param(str(name), spec, base) for name, spec in space.items())
        for param in params:
            for value in _ends(param):
                apply(base, {param.name: value}, f"search space, {param.name}: the config refuses {value!r}")
        return cls(params)

    @classmethod
    def load(cls, path: str, base: RunConfig) -> SearchSpace:
        """A space file (YAML, a path or URL) over ``base``; errors name the file."""
        try:
            return cls.parse(read_yaml(path, "search space"), base)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def distributions(self) -> dict[str, BaseDistribution]:
        return {param.name: param.distribution for param in self.params}

    def grid(self) -> dict[str, list[Choice]]:
        """The grid sampler's values of every field: a float range needs ``step`` or ``grid``."""
        missing = [param.name for param in self.params if param.grid is None]
        if missing:
            raise ValueError(
                f"the grid sampler needs the values of each float range: give {', '.join(missing)} a step "
                "(low, low + step, ... high) or grid: [values]"
            )
        return {param.name: list(param.grid or ()) for param in self.params}

    def grid_size(self) -> int:
        return math.prod(len(values) for values in self.grid().values())

    def describe(self) -> dict[str, Any]:
        return {param.name: param.describe() for param in self.params}


def apply(base: RunConfig, params: Mapping[str, Any], what: str = "") -> RunConfig:
    """``base`` with each dotted field set to its value, validated as a run config: a value the config refuses
    is its error, naming the field (and ``what``: by default, the values)."""
    data = base.model_dump()
    for name, value in params.items():
        *sections, last = name.split(".")
        node = data
        for part in sections:
            if not isinstance(node.get(part), dict):  # a section left at None (model.moe): made here
                node[part] = {}
            node = node[part]
        node[last] = value
    return validate_run_config(data, what or f"run config with {dict(params)}")


def _param(name: str, spec: Any, base: RunConfig) -> Param:
    field = _field(name, base)
    if isinstance(spec, list):
        if not spec:
            raise ValueError(f"search space, {name}: no choices; give at least one value")
        if not all(isinstance(v, Choice) for v in spec) or len(set(map(repr, spec))) < len(spec):
            raise ValueError(f"search space, {name}: choices must be distinct numbers, strings or booleans")
        return Param(name, CategoricalDistribution(spec), tuple(spec))
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"search space, {name}: give {{low, high}} (log, step, int, grid) or a list of choices"
        )
    if unknown := [str(key) for key in spec if key not in RANGE_KEYS]:
        raise ValueError(
            f"search space, {name}: unknown {', '.join(unknown)}; a range has {', '.join(RANGE_KEYS)}"
        )
    try:
        given = RangeSpec.model_validate(spec)
    except ValidationError as e:
        problems = field_problems(e, RangeSpec, (name,))
        raise ValueError("search space: " + "; ".join(problems)) from None
    low, high = given.low, given.high
    if low >= high:
        raise ValueError(f"search space, {name}: empty range: low ({low}) must be below high ({high})")
    if given.log and low <= 0:
        raise ValueError(f"search space, {name}: a log range needs low > 0 (got {low})")
    if given.log and given.step is not None:
        raise ValueError(f"search space, {name}: give log or step, not both")
    if given.step is not None and not _on_grid(high - low, given.step):
        raise ValueError(
            f"search space, {name}: high - low ({high - low}) is no multiple of step ({given.step})"
        )
    if given.grid is not None and (not given.grid or not all(low <= v <= high for v in given.grid)):
        raise ValueError(
            f"search space, {name}: grid values must lie within [{low}, {high}] (got {given.grid})"
        )
    given_numbers = (low, high, *([given.step] if given.step is not None else []), *(given.grid or ()))
    whole = all(isinstance(v, int) for v in given_numbers)
    integer = given.integer if given.integer is not None else whole and not _is_float(field)
    if integer:
        if not whole:
            raise ValueError(f"search space, {name}: an integer range needs integer low, high, step and grid")
        step = int(given.step or 1)
        values = given.grid or list(range(int(low), int(high) + 1, step))
        distribution = IntDistribution(int(low), int(high), log=given.log, step=step)
        return Param(name, distribution, tuple(int(v) for v in values))
    distribution = FloatDistribution(float(low), float(high), log=given.log, step=given.step)
    grid = given.grid or (_steps(float(low), float(high), float(given.step)) if given.step else None)
    return Param(name, distribution, tuple(float(v) for v in grid) if grid else None)


def _on_grid(span: float, step: float) -> bool:
    return abs(span / step - round(span / step)) < 1e-9


def _steps(low: float, high: float, step: float) -> list[float]:
    return [low + i * step for i in range(round((high - low) / step) + 1)]


def _ends(param: Param) -> list[Choice]:
    """The values to try on the base config at once: each choice, the range's ends and grid."""
    dist = param.distribution
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    assert isinstance(dist, FloatDistribution | IntDistribution)
    return list(dict.fromkeys([dist.low, dist.high, *(param.grid or ())]))


def _is_float(annotation: Any) -> bool:
    """The field holds floats (``float``, ``float | None``): its integer bounds still mean a float range."""
    args = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else ()
    )
    return annotation is float or float in args


MODEL = object()  # RunConfig.model: a dict of LlamaConfig fields and a size


def _field(name: str, base: RunConfig) -> Any:
    """The annotation of the value ``name`` (dotted) names in ``base``; a field the config does not have is
    an error listing the fields it has at that level."""
    parts = name.split(".")
    annotation, value = RunConfig, base
    for depth, part in enumerate(parts):
        here = ".".join(parts[:depth])
        fields = _fields(annotation, value)
        if fields is None:
            raise ValueError(f"search space, {name}: {here} is a value, not a section with fields")
        if part not in fields:
            raise ValueError(
                f"search space, {name}: the config has no field {part!r} "
                f"{f'in {here}' if here else 'at its top'}; it has: {', '.join(fields)}"
            )
        annotation, value = fields[part]
    if (inside := _fields(annotation, value)) is not None:
        raise ValueError(f"search space, {name} is a section, not a value: name one of {', '.join(inside)}")
    return annotation


def _fields(annotation: Any, value: Any) -> dict[str, tuple[Any, Any]] | None:
    """The fields (annotation, base value) of a section; None for a value."""
    if annotation is MODEL:  # the model: its size and the fields of LlamaConfig, given or from the size
        known = {"size": (str, None)} | {k: (f.annotation, None) for k, f in LlamaConfig.model_fields.items()}
        return {k: (ann, (value or {}).get(k)) for k, (ann, _) in known.items()}
    model = _model_class(annotation)
    if model is not None:
        found = {k: (f.annotation, _get(value, k)) for k, f in model.model_fields.items()}
        return found | {"model": (MODEL, _get(value, "model"))} if model is RunConfig else found
    if typing.get_origin(annotation) is dict and isinstance(value, Mapping):  # keyed sections: data.sources
        item = typing.get_args(annotation)[1]
        return {str(k): (item, v) for k, v in value.items()}
    return None


def _model_class(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return next(filter(None, map(_model_class, typing.get_args(annotation))), None)
    return None


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)
