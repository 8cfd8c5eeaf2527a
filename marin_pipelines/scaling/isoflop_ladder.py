"""An IsoFLOP ladder planned by a scaling recipe: per budget, a sweep of sizes around the recipe's
compute-optimal one, each size trained with several seeds where asked.

The ladder's step (``stages/train.py``: one partition per rung) plans from here, whether the UI, an
experiment or ``marin-pipelines forecast`` runs it. The plan is a function
of the config alone: the models' vocabulary is part of the config (the tokenizer's own may be smaller,
never larger), so the partitions exist before any text is tokenized.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from marin_pipelines.scaling.recipe import AnyRecipe, DelphiRecipe, RecipeRun
from marin_pipelines.scaling.scaling_law import budget_key, check_budgets
from marin_pipelines.train.train_config import TrainConfig

SWEEP_FACTOR = 4.0  # an IsoFLOP sweep spans N*/4 .. 4 N*: wide enough to bracket a flat optimum
MIN_POINTS = 3  # a parabola per budget needs three sizes
MIN_BUDGETS = 3  # the frontier E + A C^-a has three unknowns
_RECIPE: TypeAdapter[AnyRecipe] = TypeAdapter(AnyRecipe)


def sweep_params(optimum: float, points: int) -> list[float]:
    """``points`` non-embedding param counts spaced geometrically over optimum/4 .. optimum x 4."""
    return [optimum * SWEEP_FACTOR**x for x in np.linspace(-1.0, 1.0, points)]


def plan_budget(
    recipe: AnyRecipe, budget: float, vocab_size: int, seq_len: int, points: int
) -> tuple[list[RecipeRun], list[str], int]:
    """One budget's IsoFLOP sweep around the recipe's compute-optimal size: its distinct shapes (smallest
    first), the reasons the recipe refused points, and how many points fell on a shape already taken.
    Fewer than three shapes is an error: that budget's optimum could never be bracketed."""
    try:
        optimum = recipe.run(budget, vocab_size, seq_len)
    except ValueError as e:
        raise ValueError(f"budget {budget_key(budget)}: {e}") from None
    runs: dict[str, RecipeRun] = {}
    refused: list[str] = []
    merged = 0
    for params in sweep_params(optimum.params, points):
        try:
            run = recipe.run(budget, vocab_size, seq_len, params=params)
        except ValueError as e:
            refused.append(f"{params:.3g} params: {e}")
            continue
        merged += run.size in runs
        runs.setdefault(run.size, run)
    if len(runs) < MIN_POINTS:
        raise ValueError(
            f"budget {budget_key(budget)}: the recipe gives {len(runs)} distinct shapes "
            f"({', '.join(runs) or 'none'}) for {points} points, fewer than the {MIN_POINTS} an IsoFLOP "
            f"parabola needs ({len(refused)} refused" + (f": {refused[0]}" if refused else "") + "); raise "
            "the budget or the points per budget"
        )
    return sorted(runs.values(), key=lambda r: r.params), refused, merged


@dataclass(frozen=True)
class IsoflopRung:
    """One run of the ladder: the recipe's run at one budget and size, with one seed. ``rank`` is the
    size's place in its budget's sweep (1: the smallest); ``seeded``: the ladder has several seeds."""

    run: RecipeRun
    seed: int
    rank: int
    seeded: bool = False

    @property
    def key(self) -> str:
        """Its partition key, a cell of the budget x size grid: ``2e11|size3`` (``2e11|size3-seed1`` on a
        ladder of several seeds). Sizes are ranks, not shapes: each budget sweeps its own shapes, and a
        rank is a column every budget has."""
        column = f"size{self.rank}" + (f"-seed{self.seed}" if self.seeded else "")
        return f"{budget_key(self.run.budget)}|{column}"

    @property
    def label(self) -> str:
        """What a person reads: ``budget 2e11 d48l2 seed 0``."""
        return rung_label(self.run.budget, self.run.size, self.seed)


def rung_label(budget: float, shape: str, seed: int) -> str:
    return f"budget {budget_key(budget)} {shape} seed {seed}"


@dataclass(frozen=True)
class IsoflopPlan:
    """Every rung (budgets ascending, sizes ascending, then seeds), and per budget the sweep points the
    recipe refused and those that fell on a shape already in the sweep."""

    rungs: list[IsoflopRung]
    refused: dict[str, list[str]]
    merged: dict[str, int]


def plan_rungs(
    recipe: AnyRecipe,
    budgets: list[float],
    seeds: int,
    *,
    vocab_size: int,
    seq_len: int,
    points_per_budget: int,
    base: TrainConfig | None = None,
) -> IsoflopPlan:
    """The ladder's rungs as the recipe makes them; ``base`` gives what the recipe leaves (logging,
    checkpointing...), and each rung's seed replaces its seed."""
    rungs: list[IsoflopRung] = []
    refused: dict[str, list[str]] = {}
    merged: dict[str, int] = {}
    base = base or TrainConfig()
    for budget in sorted(budgets):
        key = budget_key(budget)
        runs, refused[key], merged[key] = plan_budget(recipe, budget, vocab_size, seq_len, points_per_budget)
        for rank, run in enumerate(runs, start=1):
            for seed in range(seeds):
                seeded = base.model_copy(update={"seed": seed})
                again = recipe.run(budget, vocab_size, seq_len, params=run.params, base=seeded)
                rungs.append(IsoflopRung(again, seed, rank, seeded=seeds > 1))
    return IsoflopPlan(rungs, refused, merged)


class IsoflopLadderConfig(BaseModel):
    """An IsoFLOP ladder: the recipe, its budgets, the sizes swept per budget and the seeds per size, the
    models' vocabulary and sequence length, and the preregistered target's budget."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recipe: AnyRecipe = Field(DelphiRecipe(), description='the scaling recipe, e.g. {"name": "delphi"}')
    budgets: list[float] = Field(min_length=MIN_BUDGETS, description="training FLOP budgets")
    points_per_budget: int = Field(5, ge=MIN_POINTS, description="sizes swept per budget")
    seeds: int = Field(1, ge=1, description="seeds per size (their spread is reported)")
    vocab_size: int = Field(
        gt=0, description="the models' vocabulary: at least the tokenizer's (a BPE may stop short of its own)"
    )
    seq_len: int = Field(128, ge=8, description="the models' sequence length, in tokens")
    target_budget: float | None = Field(None, gt=0, description="the run forecast, then trained")
    bootstrap: int = Field(200, ge=0, description="bootstrap resamples for the forecast's intervals")
    seed: int = Field(0, description="seeds the bootstrap")

    # What shapes the target run: the rule and the budget, not which rungs the ladder has.
    TARGET_FIELDS: ClassVar[set[str]] = {"recipe", "vocab_size", "seq_len", "target_budget"}

    @field_validator("budgets")
    @classmethod
    def _distinct_budgets(cls, budgets: list[float]) -> list[float]:
        return sorted(check_budgets(budgets))

    def plan(self, base: TrainConfig | None = None) -> IsoflopPlan:
        return plan_rungs(
            self.recipe,
            self.budgets,
            self.seeds,
            vocab_size=self.vocab_size,
            seq_len=self.seq_len,
            points_per_budget=self.points_per_budget,
            base=base,
        )

    def rung(self, key: str, base: TrainConfig | None = None) -> IsoflopRung:
        """The rung of a partition key; an error naming the keys when there is none."""
        rungs = {r.key: r for r in self.plan(base).rungs}
        if key not in rungs:
            raise KeyError(f"no rung {key!r} in this ladder; its rungs: {sorted(rungs)}")
        return rungs[key]

    def target(self) -> dict[str, Any]:
        """The config the target run depends on (``target_run`` takes it): adding a rung or a seed to the
        ladder changes the forecast, never the run it forecasts."""
        if self.target_budget is None:
            raise ValueError("the ladder has no target_budget")
        return self.model_dump(include=self.TARGET_FIELDS)


def target_run(target: dict[str, Any], base: TrainConfig | None = None) -> RecipeRun:
    """The recipe's compute-optimal run at the target's budget (``IsoflopLadderConfig.target()``)."""
    recipe = _RECIPE.validate_python(target["recipe"])
    return recipe.run(target["target_budget"], target["vocab_size"], target["seq_len"], base=base)
