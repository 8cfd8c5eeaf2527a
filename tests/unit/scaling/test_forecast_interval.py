"""The forecast's predictive interval: its sources, and its coverage on small numbers.

``bench/forecast_calibration.py`` measures coverage on hundreds of ladders; here 40 seeded ladders, the
Chinchilla runs and this project's recorded ladders check that the interval holds what it should, so a
change that narrows it past the evidence fails, and so does one that widens it past it.
"""

from __future__ import annotations

import math
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from marin_pipelines.scaling import synthetic_ladder
from marin_pipelines.scaling.forecast_interval import (
    FLOOR_GRID,
    LEVELS,
    birge_ratio,
    extrapolation_scale,
    floor_ranges,
    form_bias,
    power_law_with_floor,
    predictive_intervals,
)
from marin_pipelines.scaling.frontier import Forecast, backtest, forecast
from marin_pipelines.scaling.synthetic_ladder import HOFFMANN

BENCH = Path(__file__).parents[3] / "bench"


def calibration():
    """``bench/forecast_calibration.py``, whose data readers the real-ladder tests share."""
    sys.path.insert(0, str(BENCH))
    try:
        import forecast_calibration
    finally:
        sys.path.remove(str(BENCH))
    return forecast_calibration


@cache
def drawn(budgets: int, seeds: int, seed: int) -> tuple[Forecast, float]:
    """A ladder of ``budgets`` budgets a factor 2 apart from Hoffmann et al.'s law, 0.6% noise a run,
    forecast 10x past its top; and the true optimal loss there."""
    span = tuple(1e18 * 2.0 ** np.arange(budgets))
    runs = synthetic_ladder.ladder(
        HOFFMANN, span, np.random.default_rng(seed), sizes=5, seeds=seeds, noise=0.006
    )
    target = 10 * span[-1]
    return forecast(runs, target, bootstrap=100, seed=0, cross_check=False), synthetic_ladder.optimum(
        HOFFMANN, target
    )[1]


def test_each_side_is_the_root_sum_of_squares_of_its_sources():
    result, _ = drawn(4, 3, 0)
    assert set(result.intervals) == set(LEVELS)
    for level, i in result.intervals.items():
        below = math.sqrt(i.noise[0] ** 2 + i.floor[0] ** 2 + i.form[0] ** 2)
        above = math.sqrt(i.noise[1] ** 2 + i.floor[1] ** 2 + i.form[1] ** 2)
        assert i.low == pytest.approx(result.loss * (1 - below)), level
        assert i.high == pytest.approx(result.loss * (1 + above)), level
    narrow, wide = result.intervals[0.8], result.intervals[0.95]
    assert wide.low < narrow.low < result.loss < narrow.high < wide.high
    assert result.loss_interval == (wide.low, wide.high)
    written = result.as_dict()
    assert written["interval_80"] == [narrow.low, narrow.high] and written["interval_95"] == [
        wide.low,
        wide.high,
    ]
    assert set(written["interval_sources"]["95"]) == {"noise", "floor", "form"}


def test_without_resamples_the_interval_is_the_point():
    runs = synthetic_ladder.ladder(HOFFMANN, (1e18, 2e18, 4e18, 8e18), np.random.default_rng(0), sizes=5)
    result = forecast(runs, 8e19, bootstrap=0, cross_check=False)
    assert all((i.low, i.high) == (result.loss, result.loss) for i in result.intervals.values())


def test_an_unidentified_floor_widens_the_interval_upward():
    """Three budgets hold E at 0: every floor the optima allow lands higher, so the floor source reaches
    far above the forecast and not below it; seven budgets over 64x pin the floor much closer."""
    three, _ = drawn(3, 1, 0)
    seven, _ = drawn(7, 3, 0)
    assert three.frontier.E == 0
    down, up = three.intervals[0.95].floor
    assert down == 0 and up > 0.05
    assert max(seven.intervals[0.95].floor) < up / 3


def test_the_floor_profile_keeps_the_true_floor_of_an_exact_frontier():
    budgets = [1e18, 2e18, 4e18, 8e18, 1.6e19]
    losses = [1.7 + 40 * c**-0.08 for c in budgets]
    spreads = [0.003] * len(budgets)
    target = 1.6e20
    truth = 1.7 + 40 * target**-0.08
    for level, (low, high) in floor_ranges(budgets, losses, spreads, target).items():
        assert low <= truth <= high, level
        assert high - low < 0.2 * truth  # five exact optima do bound the floor


def likelihood_range(budgets, losses, spreads, target, level):
    """The forecast's central interval over E weighted by exp(-chi^2 / 2) at the spreads as given."""
    floors = np.linspace(0.0, min(losses) * (1 - 1e-3), FLOOR_GRID)
    b, k, chi, reference = power_law_with_floor(budgets, losses, spreads, floors)
    forecasts = floors + np.exp(b + k * (math.log(target) - reference))
    order = np.argsort(forecasts)
    weight = np.exp(-(chi[order] - chi.min()) / 2)
    cumulative = np.cumsum(weight) / weight.sum()
    return tuple(np.interp([(1 - level) / 2, (1 + level) / 2], cumulative, forecasts[order]))


def test_a_luckily_good_fit_does_not_narrow_the_floors_range():
    """Five optima exactly on a frontier scatter less than their spreads say (chi^2 = 0): that is luck, so
    the range is the one the spreads give, not narrower (the Birge ratio is floored at 1: a floor of 1/4
    halved these spreads). Optima that scatter more than their spreads are still widened."""
    budgets = [1e18, 2e18, 4e18, 8e18, 1.6e19]
    exact = [1.7 + 40 * c**-0.08 for c in budgets]
    spreads = [0.003] * len(budgets)
    for level, found in floor_ranges(budgets, exact, spreads, 1.6e20).items():
        assert found == pytest.approx(likelihood_range(budgets, exact, spreads, 1.6e20, level), rel=1e-9)
    assert birge_ratio(0.0, 2) == 1 and birge_ratio(1.5, 2) == 1 and birge_ratio(5.0, 0) == 1
    wiggled = [loss * (1 + 0.01 * sign) for loss, sign in zip(exact, (1, -1, 0, -1, 1), strict=True)]
    floors = np.linspace(0.0, min(wiggled) * (1 - 1e-3), FLOOR_GRID)
    ratio = power_law_with_floor(budgets, wiggled, spreads, floors)[2].min() / 2
    assert ratio > 1 and birge_ratio(ratio * 2, 2) == pytest.approx(ratio)
    widened = [s * math.sqrt(ratio) for s in spreads]
    for level, found in floor_ranges(budgets, wiggled, spreads, 1.6e20).items():
        assert found == pytest.approx(likelihood_range(budgets, wiggled, widened, 1.6e20, level), rel=1e-6)


def test_the_form_is_the_backtest_beyond_its_noise():
    assert form_bias(0.01, [0.02, -0.02, 0.0, 0.01, -0.01]) == 0  # within the resamples' spread
    assert form_bias(0.05, [0.0, 0.0]) == pytest.approx(0.05)
    assert form_bias(-0.05, [0.01, -0.01]) == pytest.approx(math.sqrt(0.05**2 - 0.0002))
    exact = [3.0 * c**-0.05 for c in (1e18, 2e18, 4e18)]
    assert backtest([1e18, 2e18, 4e18], exact) == pytest.approx(0, abs=1e-9)  # a power law forecasts itself
    bent = [*exact[:2], exact[2] * 0.97]  # the top optimum 3% below the line through the two
    assert backtest([1e18, 2e18, 4e18], bent) == pytest.approx(1 / 0.97 - 1)


def test_the_form_grows_with_the_steps_past_the_ladder_and_is_nothing_within_it():
    budgets = [1e18, 2e18, 4e18]
    assert extrapolation_scale(budgets, 4e19) == pytest.approx(math.log(10) / math.log(2))
    assert extrapolation_scale(budgets, 3e18) == 0


def test_predictive_intervals_read_the_noise_at_each_level():
    noise = list(np.linspace(1.9, 2.1, 1001))  # uniform: 80% spans +-0.08, 95% +-0.095
    found = predictive_intervals(2.0, noise, {0.8: (2.0, 2.0), 0.95: (2.0, 2.0)}, form=0.0)
    assert (found[0.8].low, found[0.8].high) == pytest.approx((1.92, 2.08))
    assert (found[0.95].low, found[0.95].high) == pytest.approx((1.905, 2.095))
    shaped = predictive_intervals(2.0, [2.0, 2.0], {0.8: (2.0, 2.0), 0.95: (2.0, 2.0)}, form=0.1)
    assert shaped[0.95].form == (0.1, 0.1)
    assert shaped[0.8].form[0] == pytest.approx(0.1 * 1.2816 / 1.96, rel=1e-3)  # z at 80% over z at 95%


def reach(result: Forecast, truth: float, level: float) -> float:
    """How far out the truth lies, in units of the interval's side it falls on: <= 1 inside it."""
    interval = result.intervals[level]
    if truth >= result.loss:
        return (truth - result.loss) / (interval.high - result.loss)
    return (result.loss - truth) / (result.loss - interval.low)


def test_the_interval_covers_the_truth_on_drawn_ladders_neither_too_rarely_nor_too_often():
    """40 seeded ladders (20 of 4 budgets over 8x, 20 of 7 over 64x, one seed), forecast 10x past the top.

    Two-sided at each level: the factor by which both sides of the interval must be scaled to hold the
    wanted share of the truths exactly (the 32nd and the 38th of the 40 reaches) lies in a band around 1,
    and the 80% interval holds 28 to 37 of them. A count alone cannot bound the 95% interval from above
    (40 of 40 is what a calibrated one gives one time in eight); the scale can. Intervals 1.3x wider than
    today's fail at both levels; 1.5x narrower hold only 27 at 80%. Today: 35 and 40 inside, scales 0.80
    and 0.74 (the 95% interval is wider than these draws need, as the bench's pooled 99% says; the Birge
    ratio floored at 1 widened both from 30 and 36 inside)."""
    results = [drawn(budgets, 1, seed) for budgets in (4, 7) for seed in range(20)]
    reaches = {level: sorted(reach(r, t, level) for r, t in results) for level in LEVELS}
    inside = {level: sum(x <= 1 for x in found) for level, found in reaches.items()}
    scale = {level: found[round(level * len(found)) - 1] for level, found in reaches.items()}
    assert 28 <= inside[0.8] <= 37 and inside[0.95] >= 36, inside
    assert 0.65 <= scale[0.8] <= 1.4 and 0.6 <= scale[0.95] <= 1.6, scale
    wider = {level: found[round(level * len(found)) - 1] / 1.3 for level, found in reaches.items()}
    assert wider[0.8] < 0.65 and wider[0.95] < 0.6  # the test's own reach: 1.3x too wide is caught


@pytest.mark.parametrize("fraction", [1 / 100, 1 / 30, 1 / 10])
def test_the_chinchilla_runs_top_optimum_lies_in_the_80_and_95_intervals(fraction):
    row = calibration().chinchilla(fraction)
    assert row["inside"] == {"80": True, "95": True}, row


# Each recorded ladder's verdict (the actual inside its 80% and 95% intervals) as the README reports it.
# In sample (the method was designed with them in view) every actual lies in its 95% interval; out of
# sample (recorded after issue 48, on text the method was not designed on) two of three fall below it.
REPORTED = {
    "demo": {"80": True, "95": True},
    "scaling_forecast": {"80": False, "95": True},
    "package_docs_1e12": {"80": False, "95": False},
    "package_docs_2e12": {"80": True, "95": True},
    "stdlib_2e12": {"80": False, "95": False},
}


def test_this_projects_recorded_ladders_fare_as_the_readme_reports():
    """A change that moves any verdict, a miss into an interval as much as a hit out of one, fails until
    the README's table says so; the out-of-sample ladders are marked so and say how they were made."""
    bench = calibration()
    records = bench.ladder_records()
    found = {row["ladder"]: row for row in map(bench.recorded, records)}
    assert {name: row["inside"] for name, row in found.items()} == REPORTED
    out_of_sample = {r["name"] for r in records if r.get("out_of_sample")}
    assert out_of_sample == {"package_docs_1e12", "package_docs_2e12", "stdlib_2e12"}
    assert all(r["about"] for r in records if r.get("out_of_sample"))
