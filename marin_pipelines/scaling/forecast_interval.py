"""The forecast's predictive interval, from three sources of error, each measured on the ladder itself.

A bootstrap over the rungs sees only how noisy the optima are. A forecast 10x past a ladder also rests on
what the ladder cannot see, so the interval adds, side by side in quadrature (relative to the forecast):

- **noise**: the resamples' forecasts with the floor E held at the point fit's, as percentiles at each
  level, widened by sqrt(n / (n - 3)) for a parabola through n runs (a bootstrap through 5 sizes
  underrates its spread). It carries the sweeps' and the seeds' noise (rungs, then runs, are resampled).
- **floor**: the forecast marginalised over E. For each E in [0, min L*) the power law through L* - E is
  fitted by weighted least squares (each optimum weighted by its own bootstrap spread) and weighted by
  its likelihood; the level's central interval of those forecasts is the floor's part. Optima that
  scatter more than their spreads say have the spreads scaled up (the Birge ratio); a luckily good fit
  is never narrowed (the ratio is at least 1, as the Particle Data Group's scale factor). With 3
  budgets, or optima on a straight line in log-log, this is what widens the interval upward: a frontier
  that flattens past the ladder lands higher.
- **form**: the curve's shape past the ladder (the plateau exit bends it). The top budget's optimum is
  forecast from the budgets below it (a backtest, by the same fit), and the error beyond what the
  resamples' own backtests show as noise is the form's bias. Scaled by how much further the target lies
  (log(target / top) / log(top / next)), it is the 95% half-width; other levels scale it by z.

``bench/forecast_calibration.py`` measures the coverage this gives: on ladders drawn from known laws, on
the Chinchilla runs and on this project's own ladders.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import norm

LEVELS = (0.8, 0.95)  # the nominal levels every forecast states
FORM_LEVEL = 0.95  # the backtest's scaled bias is read as this level's half-width
FLOOR_GRID = 400  # values of E profiled in [0, min L*)
MIN_SPREAD = 1e-4  # an optimum's relative spread is at least this: a resample-free budget still counts


@dataclass(frozen=True)
class PredictiveInterval:
    """The interval at one nominal level, and each source's part of it (relative to the forecast, as
    (below, above)); the total on each side is the sources' root sum of squares."""

    level: float
    low: float
    high: float
    noise: tuple[float, float]
    floor: tuple[float, float]
    form: tuple[float, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "interval": [self.low, self.high],
            "sources": {"noise": list(self.noise), "floor": list(self.floor), "form": list(self.form)},
        }


def power_law_with_floor(
    budgets: Sequence[float], losses: Sequence[float], spreads: Sequence[float], floor: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """L* = E + exp(b + k x), x = log C less its mean, for each ``floor`` E, by least squares in log(L* - E)
    weighted so that each residual counts as a relative error over the optimum's ``spreads``; returns
    (b, k, chi^2) per E and the mean log C. Closed form: the profile fits hundreds of floors at once."""
    log_c = np.log(np.asarray(budgets, dtype=float))
    reference = float(log_c.mean())
    x = log_c - reference
    y, s = np.asarray(losses, dtype=float), np.asarray(spreads, dtype=float)
    e = np.atleast_1d(np.asarray(floor, dtype=float))[:, None]
    excess = y - e
    u = np.log(excess)
    w = (excess / (y * s)) ** 2  # d log(L - E) = (L / (L - E)) dL / L
    sw, swx, swu = w.sum(axis=1), (w * x).sum(axis=1), (w * u).sum(axis=1)
    swxx, swxu = (w * x * x).sum(axis=1), (w * x * u).sum(axis=1)
    k = (sw * swxu - swx * swu) / (sw * swxx - swx**2)
    b = (swu - k * swx) / sw
    chi = (w * (u - b[:, None] - k[:, None] * x) ** 2).sum(axis=1)
    return b, k, chi, reference


def floor_ranges(
    budgets: Sequence[float], losses: Sequence[float], spreads: Sequence[float], target: float
) -> dict[float, tuple[float, float]]:
    """Per level, the central interval of the forecast at ``target`` marginalised over the floor E: E
    uniform on [0, min L*), each E weighted by its likelihood exp(-chi^2 / 2) with the other two unknowns
    fitted. Where the fit has degrees of freedom left (4 budgets or more), the optima's spreads are first
    rescaled by how far they scatter about the best fit (``birge_ratio``): a bootstrap's spread through 5
    sizes is itself a rough estimate."""
    floors = np.linspace(0.0, min(losses) * (1 - 1e-3), FLOOR_GRID)
    b, k, chi, reference = power_law_with_floor(budgets, losses, spreads, floors)
    forecasts = floors + np.exp(b + k * (math.log(target) - reference))
    fine = np.isfinite(forecasts) & np.isfinite(chi) & (k < 0)  # a frontier falls with compute
    if not fine.any():
        return {level: (math.nan, math.nan) for level in LEVELS}
    forecasts, chi = forecasts[fine], chi[fine]
    chi = chi / birge_ratio(float(chi.min()), len(losses) - 3)
    order = np.argsort(forecasts)
    forecasts, weight = forecasts[order], np.exp(-(chi[order] - chi.min()) / 2)
    cumulative = np.cumsum(weight) / weight.sum()
    ranges = {}
    for level in LEVELS:
        tail = (1 - level) / 2
        low, high = np.interp([tail, 1 - tail], cumulative, forecasts)
        ranges[level] = (float(low), float(high))
    return ranges


def birge_ratio(chi_min: float, dof: int) -> float:
    """How much the optima's variances are scaled up: chi^2 / dof of the best fit where that exceeds 1,
    else 1 (the Particle Data Group's scale factor, squared). Scatter above the spreads widens the interval;
    scatter below them is luck with a handful of optima, not evidence that the spreads were too wide, so it
    never narrows it. Without degrees of freedom (3 budgets, 3 unknowns) there is no scatter to read: 1."""
    return max(1.0, chi_min / dof) if dof > 0 else 1.0


def extrapolation_scale(budgets: Sequence[float], target: float) -> float:
    """How many backtest steps the target lies past the top budget: log(target / top) / log(top / next);
    0 for a target within the ladder, which the form cannot miss by extrapolating."""
    top, below = sorted(budgets)[-1], sorted(budgets)[-2]
    return max(0.0, math.log(target / top) / math.log(top / below))


def form_bias(backtest: float, resampled: Sequence[float]) -> float:
    """The backtest's error beyond its noise: sqrt(max(0, error^2 - the resamples' variance of it))."""
    values = np.asarray(resampled, dtype=float)
    values = values[np.isfinite(values)]
    noise = float(values.var(ddof=1)) if values.size > 1 else 0.0
    return math.sqrt(max(0.0, backtest**2 - noise))


def predictive_intervals(
    point: float,
    noise_forecasts: Sequence[float],
    floors: dict[float, tuple[float, float]],
    form: float,
) -> dict[float, PredictiveInterval]:
    """The intervals at ``LEVELS``: ``noise_forecasts`` are the resamples' forecasts at a fixed floor,
    ``floors`` the profile's ranges (``floor_ranges``), ``form`` the 95% half-width of the curve's form
    (relative). No resamples (``bootstrap=0``): the point alone, every source 0."""
    values = np.asarray(noise_forecasts, dtype=float)
    values = values[np.isfinite(values)]
    intervals = {}
    for level in LEVELS:
        if values.size == 0:
            intervals[level] = PredictiveInterval(level, point, point, (0, 0), (0, 0), (0, 0))
            continue
        tail = 100 * (1 - level) / 2
        low, high = (float(v) for v in np.percentile(values, [tail, 100 - tail]))
        noise = (max(0.0, 1 - low / point), max(0.0, high / point - 1))
        floor_low, floor_high = floors[level]
        floor = (max(0.0, 1 - floor_low / point), max(0.0, floor_high / point - 1))
        if not all(math.isfinite(v) for v in floor):
            floor = (0.0, 0.0)
        shape = float(form * norm.ppf(0.5 + level / 2) / norm.ppf(0.5 + FORM_LEVEL / 2))
        below, above = (math.sqrt(noise[i] ** 2 + floor[i] ** 2 + shape**2) for i in (0, 1))
        low = max(0.0, point * (1 - below))
        intervals[level] = PredictiveInterval(level, low, point * (1 + above), noise, floor, (shape, shape))
    return intervals
