"""IsoFLOP ladders drawn from a known L(N, D) with seed-like noise: what a ladder's shape can promise.

A forecast's error has two parts, the law's (the loss curve is not the form fitted) and the ladder's (its
optima are noisy, and a frontier fitted over a narrow span extrapolates that noise). Drawing ladders from
an exactly true law leaves only the second, so the tests check the fit against it and
``bench/ladder_power.py`` measures how often a ladder of a given shape lands within 1%. Laws whose curve
bends past the ladder (``BrokenLaw``, ``LateFloorLaw``) put the first part back: what a forecast's interval
must hold out of sample (``bench/forecast_calibration.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.optimize import minimize_scalar

from marin_pipelines.scaling.chinchilla import ChinchillaLaw

HOFFMANN = ChinchillaLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Hoffmann et al.'s fit


class Law(Protocol):
    """A true loss L(N, D) that ladders are drawn from, and its compute-optimal N*, D* at C = 6ND."""

    def predict(self, params: float, tokens: float) -> float: ...

    def compute_optimal(self, flops: float) -> tuple[float, float]: ...


def numeric_optimum(law: Law, flops: float, guess: float) -> tuple[float, float]:
    """N*, D* minimising ``law`` along C = 6ND, searched over N within e^6 of ``guess``."""
    centre = math.log(guess)
    found = minimize_scalar(
        lambda x: law.predict(math.exp(x), flops / (6 * math.exp(x))),
        bounds=(centre - 6, centre + 6),
        method="bounded",
        options={"xatol": 1e-9},
    )
    params = math.exp(found.x)
    return params, flops / (6 * params)


@dataclass(frozen=True)
class BrokenLaw:
    """``base`` whose reducible loss R = L - E bends where it reaches ``reducible_break``: below it R falls
    at ``1 - slowdown`` of its rate (R' = R (1 + (R_b / R)^(1/f))^(slowdown f), f the break's
    ``smoothness``), so the frontier is a broken power law in compute, Caballero et al. 2023's form. A
    frontier fitted above the break forecasts too low below it."""

    base: ChinchillaLaw
    reducible_break: float
    slowdown: float
    smoothness: float = 0.1

    def predict(self, params: float, tokens: float) -> float:
        reducible = self.base.predict(params, tokens) - self.base.E
        f = self.smoothness
        bend = (1 + (self.reducible_break / reducible) ** (1 / f)) ** (self.slowdown * f)
        return self.base.E + reducible * bend

    def compute_optimal(self, flops: float) -> tuple[float, float]:
        return numeric_optimum(self, flops, self.base.compute_optimal(flops)[0])


@dataclass(frozen=True)
class LateFloorLaw:
    """``base`` running onto a floor it does not show: L = (R^k + F^k)^(1/k), R the base's loss, F ``floor``,
    k ``sharpness``. While R is well above F the curve is the base's; as R nears F it flattens onto F within
    a few doublings of compute (the sharper, the later and the more abruptly)."""

    base: ChinchillaLaw
    floor: float
    sharpness: float

    def predict(self, params: float, tokens: float) -> float:
        k = self.sharpness
        return (self.base.predict(params, tokens) ** k + self.floor**k) ** (1 / k)

    def compute_optimal(self, flops: float) -> tuple[float, float]:
        return numeric_optimum(self, flops, self.base.compute_optimal(flops)[0])


def optimum(law: Law, flops: float) -> tuple[float, float]:
    """The true N* and L* at a budget (for ``ChinchillaLaw``, Hoffmann et al. eq. 4, exact for C = 6ND)."""
    params, tokens = law.compute_optimal(flops)
    return params, law.predict(params, tokens)


def sweep(
    law: Law,
    budget: float,
    sizes: Sequence[float],
    seeds: int,
    rng: np.random.Generator,
    noise: float,
) -> list[dict[str, float]]:
    """One budget's runs at ``sizes`` (C = 6ND), ``seeds`` each, loss times exp(noise x a normal draw)."""
    return [
        {
            "budget": budget,
            "params": n,
            "tokens": budget / (6 * n),
            "loss": law.predict(n, budget / (6 * n)) * math.exp(noise * rng.normal()),
            "seed": s,
        }
        for n in sizes
        for s in range(seeds)
    ]


def ladder(
    law: Law,
    budgets: Sequence[float],
    rng: np.random.Generator,
    *,
    sizes: int = 6,
    seeds: int = 1,
    noise: float = 0.003,
) -> list[dict[str, float]]:
    """``sizes`` sizes a budget over a factor 16 around N*, off-centre by 1.25x alternately up and down
    (a real sweep is planned around a guess of N*, not N* itself)."""
    runs = []
    for i, budget in enumerate(budgets):
        centre = optimum(law, budget)[0] * 1.25 ** (-1) ** i
        runs += sweep(law, budget, centre * np.geomspace(0.25, 4, sizes), seeds, rng, noise)
    return runs
