"""Two-step downstream forecasts (compute -> loss -> metric) on synthetic ladders with known metrics.

The ladder: 4 budgets a decade apart x 5 sizes around N* x 2 seeds, L(N, D) = E + A/N^alpha + B/D^beta
(Hoffmann et al.'s fit) with 0.3% noise, D = C / 6N; the forecast is at 10x the top budget. Tolerances
were set from 40 such ladders (measured again with the current frontier, whose figures had drifted): the
affine forecast's error had sd 0.36% (worst 0.95%), the sigmoid's sd 0.0032 (worst 0.0090). Intervals
held the truth in 37 of 40 (affine) and 39 of 40 (sigmoid) ladders; the seeds below are fixed.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from scipy.special import expit

from marin_pipelines.scaling import synthetic_ladder
from marin_pipelines.scaling.downstream import (
    DownstreamForecast,
    downstream_error,
    downstream_forecast,
    fit_metric,
    plot_downstream,
)
from marin_pipelines.scaling.frontier import Forecast, forecast
from marin_pipelines.scaling.synthetic_ladder import HOFFMANN

TRUE = HOFFMANN
BUDGETS = (1e17, 1e18, 1e19, 1e20)
TARGET = 10 * BUDGETS[-1]
NOISE = 0.003  # multiplicative, on each run's loss
AFFINE = {"a": 0.2, "b": 1.3}  # e.g. bits per byte on another text set
AFFINE_NOISE = 0.003
CHANCE = 0.25  # 4-way multiple choice
SIGMOID = {"low": CHANCE, "high": 0.85, "k": 3.0, "mid": 3.0}  # the ladder's losses run 2.6 to 4.6
SIGMOID_NOISE = 0.005  # absolute: a benchmark of about 10k items


def affine(loss: float) -> float:
    return AFFINE["a"] + AFFINE["b"] * loss


def sigmoid(loss: float) -> float:
    return CHANCE + (SIGMOID["high"] - CHANCE) * float(expit(-SIGMOID["k"] * (loss - SIGMOID["mid"])))


TRUE_LOSS = TRUE.predict(*TRUE.compute_optimal(TARGET))  # 2.33, below every run's


def ladder(seed: int) -> list[dict]:
    """4 budgets x 5 sizes x 2 seeds from TRUE, each run with both downstream metrics of its loss."""
    rng = np.random.default_rng(seed)
    runs = synthetic_ladder.ladder(TRUE, BUDGETS, rng, sizes=5, seeds=2, noise=NOISE)
    for run in runs:
        run["bpb/stdlib"] = affine(run["loss"]) + AFFINE_NOISE * rng.normal()
        run["acc/arc_easy"] = sigmoid(run["loss"]) + SIGMOID_NOISE * rng.normal()
    return runs


@cache
def loss_forecast(seed: int) -> Forecast:
    return forecast(ladder(seed), TARGET, bootstrap=100, seed=0, cross_check=False)


def test_noiseless_maps_are_recovered_exactly():
    losses = np.linspace(2.5, 4.5, 9)
    line = fit_metric(losses, [affine(x) for x in losses], "affine")
    assert line.parameters == pytest.approx(AFFINE, rel=1e-9)
    assert (line.r2, line.residual_std, line.n_runs, line.loss_range) == (
        pytest.approx(1),
        pytest.approx(0),
        9,
        (2.5, 4.5),
    )
    assert line.formula == "m = 0.2 + 1.3 L" and line.fixed == ()
    curve = fit_metric(losses, [sigmoid(x) for x in losses], "sigmoid", chance=CHANCE)
    assert curve.parameters == pytest.approx(SIGMOID, rel=1e-6)
    assert curve.fixed == ("low",) and curve.formula == "m = 0.25 + (0.85 - 0.25) / (1 + exp(3 (L - 3)))"
    assert curve(3.0) == pytest.approx(0.55) and isinstance(curve(3.0), float)
    assert curve(np.array([2.0, 3.0])) == pytest.approx([sigmoid(2.0), 0.55])
    falling = fit_metric(losses, [1 - 0.1 * x for x in losses], "affine")
    assert falling.formula == "m = 1 - 0.1 L"


def test_the_sigmoid_stays_in_its_bounds():
    """high is at most 1, k at least 0 (the metric falls as the loss rises)."""
    losses = np.linspace(2.5, 4.5, 9)
    saturating = [CHANCE + 0.75 * float(expit(-4 * (x - 2.6))) for x in losses]  # high = 1 exactly
    curve = fit_metric(losses, saturating, "sigmoid", CHANCE)
    assert curve.parameters == pytest.approx({"low": CHANCE, "high": 1.0, "k": 4.0, "mid": 2.6}, rel=1e-6)
    rising = fit_metric(losses, [0.3 + 0.05 * x for x in losses], "sigmoid", CHANCE)
    assert rising.parameters["k"] == pytest.approx(0, abs=1e-9)  # a flat line: the nearest falling curve
    assert rising.r2 == pytest.approx(0, abs=1e-9)


def test_bad_inputs_are_refused():
    losses, metrics = [2.5, 3.0, 3.5], [0.6, 0.5, 0.4]
    with pytest.raises(ValueError, match="needs 3 runs, got 2"):
        fit_metric(losses[:2], metrics[:2])
    with pytest.raises(ValueError, match="sigmoid map fits 3 unknowns: it needs 4 runs, got 3"):
        fit_metric(losses, metrics, "sigmoid", chance=CHANCE)
    with pytest.raises(ValueError, match="every loss must be finite"):
        fit_metric([2.5, math.nan, 3.5], metrics)
    with pytest.raises(ValueError, match="every metric must be finite"):
        fit_metric(losses, [0.6, math.inf, 0.4])
    with pytest.raises(ValueError, match="the losses do not vary"):
        fit_metric([3.0, 3.0, 3.0], metrics)
    with pytest.raises(ValueError, match="the losses do not vary"):
        fit_metric([3.0] * 4, [*metrics, 0.3], "sigmoid", chance=CHANCE)
    with pytest.raises(ValueError, match="chance level"):
        fit_metric([*losses, 4.0], [*metrics, 0.3], "sigmoid")
    with pytest.raises(ValueError, match="an affine map takes none"):
        fit_metric(losses, metrics, "affine", chance=CHANCE)
    with pytest.raises(ValueError, match="kind must be one of"):
        fit_metric(losses, metrics, "power")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"accuracy in \[0, 1\]"):
        fit_metric([*losses, 4.0], [1.2, 0.5, 0.4, 0.3], "sigmoid", chance=CHANCE)
    with pytest.raises(ValueError, match="two lists of one length"):
        fit_metric(losses, metrics[:2])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_affine_forecast_is_within_one_percent(seed: int):
    result = downstream_forecast(ladder(seed), "bpb/stdlib", loss_forecast(seed), bootstrap=200)
    truth = affine(TRUE_LOSS)
    assert result.value == pytest.approx(truth, rel=0.01)  # 40 ladders: sd 0.36%, worst 0.95%
    assert result.interval[0] <= truth <= result.interval[1]
    assert result.map.parameters["a"] == pytest.approx(AFFINE["a"], abs=0.01)  # sd 0.0024
    assert result.map.parameters["b"] == pytest.approx(AFFINE["b"], abs=0.003)  # sd 0.0007
    assert result.map.residual_std == pytest.approx(AFFINE_NOISE, rel=0.4)
    assert result.loss == loss_forecast(seed).loss and result.value == result.map(result.loss)
    assert (result.n_runs, result.n_skipped, result.bootstrap, result.kind) == (40, 0, 200, "affine")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sigmoid_forecast_is_within_two_points(seed: int):
    result = downstream_forecast(
        ladder(seed), "acc/arc_easy", loss_forecast(seed), kind="sigmoid", chance=CHANCE, bootstrap=200
    )
    truth = sigmoid(TRUE_LOSS)
    assert result.value == pytest.approx(truth, abs=0.02)  # 40 ladders: sd 0.0032, worst 0.0090
    assert result.interval[0] <= truth <= result.interval[1]
    fitted = result.map.parameters
    assert fitted["low"] == CHANCE
    assert fitted["high"] == pytest.approx(SIGMOID["high"], abs=0.04)  # sd 0.0095
    assert fitted["k"] == pytest.approx(SIGMOID["k"], abs=0.2)  # sd 0.051
    assert fitted["mid"] == pytest.approx(SIGMOID["mid"], abs=0.05)  # sd 0.013
    assert result.map.r2 > 0.99 and (result.n_runs, result.bootstrap) == (40, 200)


def test_the_interval_carries_the_loss_interval_through_the_map():
    """A noiseless map has no uncertainty of its own: the interval is the map of a split normal's."""
    runs = [{"loss": x, "bpb": affine(x)} for x in np.linspace(2.6, 4.6, 12)]
    skewed = replace(loss_forecast(0), loss=2.35, loss_interval=(2.30, 2.45))  # halves 0.05 and 0.10
    result = downstream_forecast(runs, "bpb", skewed, bootstrap=4000, seed=1)
    assert result.map_interval == pytest.approx((affine(2.35), affine(2.35)), abs=1e-9)
    low, high = result.interval
    assert low == pytest.approx(affine(2.30), abs=0.15 * 1.3 * 0.05)  # a percentile of 4000: sd 4%
    assert high == pytest.approx(affine(2.45), abs=0.15 * 1.3 * 0.10)
    # An interval end on the wrong side of the point is a zero-width half: no sample below the point.
    lopsided = downstream_forecast(runs, "bpb", replace(skewed, loss_interval=(2.36, 2.45)), bootstrap=400)
    assert lopsided.interval[0] == pytest.approx(affine(2.35), abs=1e-9)
    exact = downstream_forecast(runs, "bpb", replace(skewed, loss_interval=(2.35, 2.35)), bootstrap=50)
    assert exact.interval == pytest.approx(exact.map_interval, abs=1e-9)
    with pytest.raises(ValueError, match="finite interval"):
        downstream_forecast(runs, "bpb", replace(skewed, loss_interval=(math.nan, math.nan)))


def test_the_interval_is_wider_than_the_maps_alone():
    result = downstream_forecast(ladder(0), "bpb/stdlib", loss_forecast(0), bootstrap=200)
    map_low, map_high = result.map_interval
    assert result.interval[0] < map_low <= result.value <= map_high < result.interval[1]
    # The map's own: about the textbook interval of a fitted line's mean at the forecast loss.
    losses = np.array([r["loss"] for r in ladder(0)])
    leverage = 1 / len(losses) + (result.loss - losses.mean()) ** 2 / ((losses - losses.mean()) ** 2).sum()
    textbook = 2 * 1.96 * result.map.residual_std * math.sqrt(leverage)
    assert map_high - map_low == pytest.approx(textbook, rel=0.5)
    loss_low, loss_high = loss_forecast(0).loss_interval
    width = result.interval[1] - result.interval[0]
    assert width == pytest.approx(AFFINE["b"] * (loss_high - loss_low), rel=0.3)  # the loss dominates


def test_runs_lacking_the_metric_are_skipped_and_counted():
    runs = ladder(0)
    for run in runs[:7]:
        del run["bpb/stdlib"]
    for run in runs[7:10]:
        run["bpb/stdlib"] = None
    result = downstream_forecast(runs, "bpb/stdlib", loss_forecast(0), bootstrap=50)
    assert (result.n_runs, result.n_skipped) == (30, 10)
    alone = downstream_forecast(runs[10:], "bpb/stdlib", loss_forecast(0), bootstrap=50)
    assert (alone.value, alone.interval, alone.map) == (result.value, result.interval, result.map)
    with pytest.raises(ValueError, match="have no loss"):
        downstream_forecast([*runs, {"bpb/stdlib": 3.0}], "bpb/stdlib", loss_forecast(0))


def test_too_few_runs_with_the_metric_name_it():
    runs = ladder(0)
    for run in runs[2:]:
        del run["bpb/stdlib"]
    with pytest.raises(
        ValueError, match=r"metric 'bpb/stdlib' \(2 runs with it, 38 without\): .*needs 3 runs, got 2"
    ):
        downstream_forecast(runs, "bpb/stdlib", loss_forecast(0))
    with pytest.raises(ValueError, match=r"metric 'acc/mmlu' \(0 runs with it, 40 without\)"):
        downstream_forecast(runs, "acc/mmlu", loss_forecast(0), kind="sigmoid", chance=CHANCE)


def test_the_forecast_is_seeded():
    runs = ladder(1)
    first = downstream_forecast(
        runs, "acc/arc_easy", loss_forecast(1), kind="sigmoid", chance=CHANCE, bootstrap=40, seed=3
    )
    again = downstream_forecast(
        runs, "acc/arc_easy", loss_forecast(1), kind="sigmoid", chance=CHANCE, bootstrap=40, seed=3
    )
    assert first == again
    other = downstream_forecast(
        runs, "acc/arc_easy", loss_forecast(1), kind="sigmoid", chance=CHANCE, bootstrap=40, seed=4
    )
    assert other.value == first.value and other.interval != first.interval
    back = json.loads(json.dumps(first.as_dict(), allow_nan=False))
    assert back["interval"] == list(first.interval) and back["map"]["parameters"] == first.map.parameters
    assert (back["metric"], back["kind"], back["seed"], back["bootstrap"]) == (
        "acc/arc_easy",
        "sigmoid",
        3,
        40,
    )
    assert back["target_budget"] == TARGET and back["map"]["formula"] == first.map.formula


def _prediction(value: float = 0.7, interval: tuple[float, float] = (0.68, 0.73)) -> DownstreamForecast:
    line = fit_metric([1.0, 2.0, 3.0], [0.9, 0.8, 0.7])
    return DownstreamForecast(
        "acc", "affine", value, interval, interval, 3.0, (2.9, 3.1), 1e21, line, 3, 0, 0, 0
    )


def test_the_error_against_the_actual():
    error = downstream_error(_prediction(), 0.75)
    assert error["relative_error"] == pytest.approx((0.7 - 0.75) / 0.75)
    assert error["error"] == pytest.approx(-0.05) and error["within_interval"] is False
    assert (error["predicted"], error["actual"], error["metric"]) == (0.7, 0.75, "acc")
    assert downstream_error(_prediction(), 0.72)["within_interval"] is True
    assert downstream_error(_prediction(), 0.0)["relative_error"] is None
    with pytest.raises(ValueError, match="must be finite"):
        downstream_error(_prediction(), math.nan)


def test_the_plot_writes_a_png(tmp_path):
    runs = ladder(0)
    prediction = downstream_forecast(
        runs, "acc/arc_easy", loss_forecast(0), kind="sigmoid", chance=CHANCE, bootstrap=50
    )
    plot_downstream(runs, prediction, tmp_path / "with.png", actual=sigmoid(TRUE_LOSS), actual_loss=TRUE_LOSS)
    plain = [{"loss": r["loss"], "acc/arc_easy": r["acc/arc_easy"]} for r in runs] + [{"loss": 3.0}]
    plot_downstream(plain, prediction, str(tmp_path / "plain.png"))
    for name in ("with.png", "plain.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
