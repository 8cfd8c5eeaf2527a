"""Pydantic validation errors as a message a person reads: every bad field at once, each with its dotted
path, what is wrong with the value given, and what is allowed (an unknown field lists the known ones).

Used wherever config enters (an experiment's step configs, a training YAML, command-line flags), so that
no pydantic dump (types, URLs) reaches the user.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

_SCALARS = (str, int, float, bool, type(None))


def field_problems(
    error: ValidationError, model: type[BaseModel] | None = None, prefix: Sequence[str | int] = ()
) -> list[str]:
    """One line per bad field, ``path: what is wrong (got VALUE)``; ``model`` (the class validated) lets
    an unknown field name the allowed ones; ``prefix`` is put in front of every path."""
    out = []
    for err in error.errors(include_url=False):
        loc = (*prefix, *err["loc"])
        path = ".".join(str(part) for part in loc) or "(config)"
        kind, value = err["type"], err.get("input")
        if kind == "extra_forbidden":
            allowed = allowed_fields(model, err["loc"][:-1]) if model is not None else None
            message = "unknown field" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
        elif kind == "missing":
            message = "required, not given"
        else:
            message = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
            if isinstance(value, _SCALARS) and kind != "value_error":
                message += f" (got {_short(value)})"
        out.append(f"{path}: {message}")
    return out


def describe(
    error: ValidationError,
    model: type[BaseModel] | None = None,
    title: str | None = None,
    prefix: Sequence[str | int] = (),
) -> str:
    """``invalid Title: problem`` for one problem, else the title and one indented line per problem."""
    problems = field_problems(error, model, prefix)
    head = f"invalid {title or error.title}"
    if len(problems) == 1:
        return f"{head}: {problems[0]}"
    return f"{head} ({len(problems)} problems):\n" + "\n".join(f"  {p}" for p in problems)


def allowed_fields(model: type[BaseModel], loc: Sequence[str | int]) -> list[str] | None:
    """The field names of the model found at ``loc`` inside ``model`` (None where there is no model)."""
    current: Any = model
    for part in loc:
        current = _model_in(current)
        if current is None:
            return None
        if isinstance(current, dict):  # a dict's value type: the part is a key
            current = current["value"]
            continue
        if isinstance(current, list):  # a list's item type: the part is an index
            current = current[0]
            continue
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = field.annotation
    found = _model_in(current)
    return list(found.model_fields) if isinstance(found, type) else None


def _model_in(annotation: Any) -> Any:
    """A BaseModel class in ``annotation`` (Optional / Union unwrapped), or a marker for dict / list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            if (found := _model_in(arg)) is not None:
                return found
        return None
    if origin is dict and len(args) == 2:
        return {"value": args[1]}
    if origin in (list, tuple, set, frozenset) and args:
        return [args[0]]
    return None


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
