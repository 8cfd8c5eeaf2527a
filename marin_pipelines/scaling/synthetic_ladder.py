"""IsoFLOP ladders drawn from a known L(N, D) with seed-like noise: what a ladder's shape can promise.

A forecast's error has two parts, the law's (the loss curve is not the form fitted) and the ladder's (its
optima are noisy, and a frontier fitted over a narrow span extrapolates that noise). Drawing ladders from
an exactly true law leaves only the second, so the tests check the fit against it and
``bench/ladder_power.py`` measures how often a ladder of a given shape lands within 1%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from marin_pipelines.scaling.chinchilla import ChinchillaLaw

HOFFMANN = ChinchillaLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Hoffmann et al.'s fit


def optimum(law: ChinchillaLaw, flops: float) -> tuple[float, float]:
    """The true N* and L* at a budget (Hoffmann et al. eq. 4, exact for C = 6ND)."""
    params, tokens = law.compute_optimal(flops)
    return params, law.predict(params, tokens)


def sweep(
    law: ChinchillaLaw,
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
    law: ChinchillaLaw,
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
