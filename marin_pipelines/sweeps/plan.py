"""A sweep as its workers know it: the base run, the data, the space and the settings, checked once before any
trial trains (a bad space, a metric no trial reports, a grid smaller than the trials asked, a validation split
too short to report on), and the study they share."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from marin_pipelines.sweeps.settings import SweepSettings
from marin_pipelines.sweeps.space import SearchSpace
from marin_pipelines.sweeps.study import journal_path, make_pruner, open_study, storage_of
from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.train.reporting import ValidationBatches
from marin_pipelines.train.run_config import RunConfig


@dataclass(frozen=True)
class SweepPlan:
    """What every worker of a sweep is given (picklable: a worker may be another process)."""

    base: RunConfig
    data: str
    space: SearchSpace
    settings: SweepSettings
    out: str
    storage: str | None
    data_identity: str
    vocab_size: int
    progress: bool = True

    @classmethod
    def make(
        cls,
        base: RunConfig,
        data: str,
        space: SearchSpace | Mapping[str, Any],
        settings: SweepSettings,
        out: str,
        storage: str | None = None,
        progress: bool = True,
    ) -> SweepPlan:
        """The plan, every input checked against the others."""
        if not isinstance(space, SearchSpace):
            space = SearchSpace.parse(space, base)
        cache = TokenCache(data)
        vocab_size = cache.info["vocab_size"]
        model = base.llama(vocab_size)
        batches = settings.validation_batches
        ValidationBatches(cache.validation, model.seq_len, base.train.batch_size, batches, data)
        if settings.sampler == "grid" and settings.trials > (points := space.grid_size()):
            raise ValueError(
                f"the grid has {points} points: ask for {points} trials or fewer, not {settings.trials}"
            )
        journal_path(out, storage)  # a journal file that cannot be: said now
        return cls(
            base, data, space, settings, out.rstrip("/"), storage, cache.identity, vocab_size, progress
        )

    @property
    def report_every(self) -> int:
        return self.settings.reports_every(self.base.train.steps)

    @property
    def longest(self) -> int:
        """The most steps a trial trains (the space may search ``train.steps``): Hyperband's largest rung."""
        steps = [self.base.train.steps]
        for param in self.space.params:
            if param.name == "train.steps":
                steps += [int(v) for v in (param.grid or ())] + [int(getattr(param.distribution, "high", 0))]
        return max(steps)

    def identity(self) -> dict[str, Any]:
        """What makes this sweep this sweep (``study.open_study``): not the trials asked, nor the workers."""
        return {
            "base": self.base.model_dump(mode="json"),
            "data": self.data_identity,
            "space": self.space.describe(),
            **self.settings.model_dump(mode="json", exclude={"trials", "report_every"}),
            "report_every": self.report_every,
        }

    def study(self) -> optuna.Study:
        """The sweep's study, created where there is none; call it under ``claims.asking``."""
        storage, name, where = storage_of(self.out, self.storage)
        pruner = make_pruner(self.settings, self.report_every, self.longest)
        return open_study(storage, name, where, self.identity(), pruner)

    def say(self, message: str) -> None:
        """A progress line on stderr."""
        if self.progress:
            print(f"sweep {self.out}: {message}", file=sys.stderr, flush=True)
