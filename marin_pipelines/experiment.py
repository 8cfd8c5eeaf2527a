"""An experiment: a named set of steps declared in code, found by itself, usually ending in a comparison.

An experiment module (under ``marin_pipelines/experiments/`` or a folder on ``MARIN_EXPERIMENTS_PATH``)
declares steps with the helpers of ``experiments/defaults.py`` and one ``Experiment`` naming the steps
it asks for; everything upstream of them comes along. Steps are shared by name across experiments
(``steps.py``), so an ablation declared over the demo's steps recomputes none of them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import re
import sys
import traceback
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType

from marin_pipelines.steps import Step, StepError, declared_at, topological, unique_steps

EXPERIMENTS_PACKAGE = "marin_pipelines.experiments"
PATH_VARIABLE = "MARIN_EXPERIMENTS_PATH"
SKIPPED_MODULES = ("defaults", "speedrun")  # helpers and speedrun submissions, not experiments
NAME = r"[a-z][a-z0-9_]*"


class ExperimentError(StepError):
    """An experiment that cannot be loaded: the message names the file and the field."""


@dataclass(eq=False)
class Experiment:
    name: str
    steps: list[Step]
    description: str = ""
    declared_at: str = field(default_factory=declared_at)

    def __post_init__(self) -> None:
        if not re.fullmatch(NAME, self.name):
            raise ExperimentError(f"experiment {self.name!r} ({self.declared_at}): name must match {NAME}")
        if not self.steps or not all(isinstance(s, Step) for s in self.steps):
            raise ExperimentError(
                f"experiment {self.name!r} ({self.declared_at}): steps must be a list of Steps"
            )
        unique_steps(self.all_steps)  # one name, one step: the clear error names both places

    @cached_property
    def all_steps(self) -> list[Step]:
        """Every step the experiment needs, each after its upstreams."""
        return topological(self.steps)

    def step(self, name: str) -> Step:
        for step in self.all_steps:
            if step.name == name:
                return step
        raise KeyError(f"experiment {self.name} has no step {name!r}")


def discover_experiments(paths: list[str] | None = None) -> dict[str, Experiment]:
    """Every experiment defined in the package's modules and in the folders of ``paths`` (default:
    ``MARIN_EXPERIMENTS_PATH``, separated by ``os.pathsep``), by name. A module defines an experiment by
    holding an ``Experiment`` declared in it; a module that fails to import is an error naming its file."""
    if paths is None:
        paths = [p for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    modules = [_import(name) for name in _package_modules()]
    for folder in paths:
        if not Path(folder).is_dir():
            raise ExperimentError(f"{PATH_VARIABLE}: {folder} is not a folder")
        modules += [
            _import_file(file) for file in sorted(Path(folder).glob("*.py")) if file.stem != "__init__"
        ]
    found: dict[str, Experiment] = {}
    for module in modules:
        for experiment in _declared_in(module):
            if experiment.name in found and found[experiment.name] is not experiment:
                raise ExperimentError(
                    f"two experiments are named {experiment.name!r}: at {found[experiment.name].declared_at} "
                    f"and at {experiment.declared_at}"
                )
            found[experiment.name] = experiment
    unique_steps(step for experiment in found.values() for step in experiment.all_steps)
    return dict(sorted(found.items()))


def _package_modules() -> list[str]:
    package = importlib.import_module(EXPERIMENTS_PACKAGE)
    return [
        f"{EXPERIMENTS_PACKAGE}.{info.name}"
        for info in pkgutil.iter_modules(package.__path__)
        if info.name not in SKIPPED_MODULES and not info.name.startswith("_")
    ]


def _declared_in(module: ModuleType) -> list[Experiment]:
    """The experiments a module declares itself (not those it imports from another experiment)."""
    file = str(Path(module.__file__ or "").resolve())
    return [
        value for value in vars(module).values() if isinstance(value, Experiment) and _file_of(value) == file
    ]


def _file_of(experiment: Experiment) -> str:
    where = experiment.declared_at.rsplit(":", 1)[0]
    path = Path(where)
    return str((path if path.is_absolute() else Path(__file__).resolve().parent.parent / path).resolve())


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except StepError as e:
        raise ExperimentError(f"{_module_file(name)}: {e}") from None
    except Exception as e:
        file = _module_file(name)
        raise ExperimentError(f"{file}: {_where(e, file)}{type(e).__name__}: {e}") from None


def _import_file(path: Path) -> ModuleType:
    name = f"marin_experiments_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except StepError as e:
        del sys.modules[name]
        raise ExperimentError(f"{path}: {e}") from None
    except Exception as e:
        del sys.modules[name]
        raise ExperimentError(f"{path}: {_where(e, str(path))}{type(e).__name__}: {e}") from None
    return module


def _module_file(name: str) -> str:
    spec = importlib.util.find_spec(name)
    return str(spec.origin) if spec and spec.origin else name


def _where(error: Exception, file: str) -> str:
    """``line N: `` of the experiment file's line that failed, from the traceback."""
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if f.filename == file]
    return f"line {lines[-1]}: " if lines else ""
