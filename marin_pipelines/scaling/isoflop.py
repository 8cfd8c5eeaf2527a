"""Isoflop profiles (Chinchilla approach 2): per budget, a parabola of loss in log N; its vertex is N*(C).

Across budgets, N*(C) = k_N C^a and D*(C) = k_D C^b are power laws fitted by least squares in log-log.
A profile needs at least 3 sizes at that budget and an upward parabola. A vertex outside the sizes
trained (``inside`` false) is kept in the report but left out of the power laws: a parabola says
little beyond its points, and the optimum is then simply not bracketed by the ladder.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class IsoflopProfile:
    budget: float
    params: float  # N* at this budget
    tokens: float  # D* at this budget, interpolated log-linearly in log N
    loss: float  # the parabola's minimum
    inside: bool  # N* within the sizes trained at this budget


@dataclass(frozen=True)
class PowerLaw:
    """y = coefficient * C^exponent."""

    coefficient: float
    exponent: float

    def __call__(self, flops: float) -> float:
        return self.coefficient * flops**self.exponent


@dataclass(frozen=True)
class IsoflopFit:
    profiles: tuple[IsoflopProfile, ...]
    params: PowerLaw | None  # N*(C); None with fewer than 2 profiles
    tokens: PowerLaw | None  # D*(C)

    def compute_optimal(self, flops: float) -> tuple[float, float] | None:
        if self.params is None or self.tokens is None:
            return None
        return self.params(flops), self.tokens(flops)

    def as_dict(self) -> dict[str, Any]:
        return {
            "profiles": [asdict(p) for p in self.profiles],
            "params_law": asdict(self.params) if self.params else None,
            "tokens_law": asdict(self.tokens) if self.tokens else None,
        }


def fit_power_law(flops: Sequence[float], values: Sequence[float]) -> PowerLaw:
    """values = k C^e by least squares in log-log."""
    exponent, intercept = np.polyfit(np.log(flops), np.log(values), 1)
    return PowerLaw(coefficient=float(np.exp(intercept)), exponent=float(exponent))


def isoflop_vertex(budget: float, runs: Sequence[dict[str, float]]) -> IsoflopProfile | str:
    """The parabola's vertex for one budget's runs (keys params, tokens, loss), or why there is none.

    Several runs at one size (seeds) are all fitted: the parabola goes through their mean.
    """
    log_n = np.log([float(r["params"]) for r in runs])
    sizes = len(np.unique(log_n))
    if sizes < 3:
        return f"{sizes} distinct sizes (a parabola needs 3)"
    loss = np.array([float(r["loss"]) for r in runs])
    c2, c1, c0 = np.polyfit(log_n, loss, 2)
    if c2 <= 0:
        return "loss is not convex in log N (the parabola opens downward)"
    vertex = -c1 / (2 * c2)
    slope, intercept = np.polyfit(log_n, np.log([float(r["tokens"]) for r in runs]), 1)
    return IsoflopProfile(
        budget=budget,
        params=float(np.exp(vertex)),
        tokens=float(np.exp(intercept + slope * vertex)),
        loss=float(c0 + c1 * vertex + c2 * vertex**2),
        inside=bool(log_n.min() <= vertex <= log_n.max()),
    )


def isoflop_profile(budget: float, runs: Sequence[dict[str, float]]) -> IsoflopProfile | None:
    """The parabola's vertex for one budget's runs; None if there is none (``isoflop_vertex`` says why)."""
    vertex = isoflop_vertex(budget, runs)
    return vertex if isinstance(vertex, IsoflopProfile) else None


def group_by_budget(runs: Sequence[dict[str, float]]) -> dict[float, list[dict[str, float]]]:
    """Runs per ``budget`` key, budgets ascending, runs in their order."""
    by_budget: dict[float, list[dict[str, float]]] = defaultdict(list)
    for run in runs:
        by_budget[float(run["budget"])].append(run)
    return dict(sorted(by_budget.items()))


def fit_isoflops(runs: Sequence[dict[str, float]]) -> IsoflopFit:
    """Profiles per ``budget`` key and the power laws over them."""
    profiles = [isoflop_profile(budget, group) for budget, group in group_by_budget(runs).items()]
    found = tuple(p for p in profiles if p is not None)
    bracketed = [p for p in found if p.inside]
    if len(bracketed) < 2:
        return IsoflopFit(found, None, None)
    budgets = [p.budget for p in bracketed]
    return IsoflopFit(
        found,
        fit_power_law(budgets, [p.params for p in bracketed]),
        fit_power_law(budgets, [p.tokens for p in bracketed]),
    )
