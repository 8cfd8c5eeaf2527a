"""The ladder planner: candidates planned as ``isoflop_ladder`` runs them, scored on synthetic ladders."""

import json

import numpy as np
import pytest

from marin_pipelines.experiments.scaling_forecast import LADDER
from marin_pipelines.scaling import synthetic_ladder
from marin_pipelines.scaling.frontier import forecast
from marin_pipelines.scaling.isoflop_ladder import IsoflopLadderConfig
from marin_pipelines.scaling.ladder_planner import (
    DEFAULT_NOISE,
    DRAW_BATCH,
    MAX_DRAWS,
    ForecastErrors,
    draws_to_decide,
    forecast_errors,
    noise_from_forecast,
    plan_ladder,
    synthetic_budgets,
)
from marin_pipelines.scaling.synthetic_ladder import HOFFMANN

# scaling_forecast's ladder: its recipe constants, vocabulary and target
TARGET = {"recipe": LADDER["recipe"], "vocab_size": 512, "seq_len": 128}
SMALL = {**TARGET, "max_budgets": 4, "max_seeds": 2, "max_draws": 40}  # a few candidates, one batch each


def test_the_plan_is_the_ladder_isoflop_ladder_runs():
    plan = plan_ladder(1.6e13, 0.05, **SMALL)
    config = IsoflopLadderConfig(**plan.ladder_config())
    rungs = config.plan().rungs
    assert config.budgets == list(plan.budgets) and config.seeds == plan.seeds
    assert len(rungs) == plan.runs
    assert sum(r.run.flops for r in rungs) == pytest.approx(plan.ladder_flops, rel=1e-12)
    assert plan.ratio == pytest.approx(plan.ladder_flops / 1.6e13)
    assert max(plan.budgets) == pytest.approx(1.6e12)  # the target over the extrapolation, 10
    assert config.recipe.head_dim == 8 and config.target_budget == 1.6e13
    assert plan.ladder_config()["recipe"] == LADDER["recipe"]  # only what it overrides, as written


def test_a_loose_error_gets_the_cheapest_ladder_that_clearly_reaches_it():
    """The plan is the cheapest candidate whose pass rate's interval lies at or above the probability; a
    cheaper one that showed 90% or more of its 40 draws, its interval still holding 90%, is not it."""
    plan = plan_ladder(1.6e13, 0.05, **SMALL)
    assert plan.reachable and "out of reach" not in plan.message
    assert plan.chosen.verdict == "reaches" and plan.probability_interval[0] >= 0.9
    meeting = [c for c in plan.candidates if c.verdict == "reaches"]
    assert plan.ladder_flops == min(c.ladder_flops for c in meeting)
    cheaper = [c for c in plan.candidates if c.ladder_flops < plan.ladder_flops]
    assert any(c.probability >= 0.9 and c.verdict == "undecided" for c in cheaper)
    assert len(plan.candidates) == 2 * 2  # 3 and 4 budgets, 1 and 2 seeds
    written = json.loads(json.dumps(plan.as_dict()))
    assert written["ladder"]["seeds"] == plan.seeds and written["draws"] == plan.draws == 40
    assert written["probability_interval"] == list(plan.probability_interval)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"error": 1e-4}, "out of reach"),
        ({"error": 0.05, "max_ladder_ratio": 0.1}, "No candidate ladder fits within 0.1x"),
    ],
)
def test_an_accuracy_out_of_reach_is_a_plan_that_says_so(limits, message):
    plan = plan_ladder(1.6e13, limits.pop("error"), **SMALL, **limits)
    assert not plan.reachable and message in plan.message
    assert plan.budgets and plan.ladder_flops > 0  # the best candidate, with its cost
    # the best: the smallest error it lands within at the wanted probability
    assert plan.error_at_probability == min(c.error_at_probability for c in plan.candidates)


def test_the_recipe_refuses_budgets_too_small_for_its_shapes():
    plan = plan_ladder(1e12, 0.05, **{**SMALL, "max_budgets": 5, "max_seeds": 1})
    refused = {len(c.budgets): c.refused for c in plan.candidates}
    assert refused[3] is None and refused[4] is None
    assert "budget 6.25e09: the recipe gives 2 distinct shapes" in refused[5]
    assert len(plan.budgets) < 5
    with pytest.raises(ValueError, match="the recipe plans no candidate ladder below 1e"):
        plan_ladder(1e11, 0.05, **SMALL)


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("error", 0.0),
        ("probability", 1.0),
        ("probability", 0.0),
        ("extrapolation", 0.5),
        ("noise", -0.01),
        ("points_per_budget", 2),
        ("max_budgets", 2),
        ("max_seeds", 0),
        ("max_draws", 34),  # 35 draws all within the error are the fewest that clear 90%
        ("max_ladder_ratio", 0.0),
        ("min_budget", 1e12),  # above 1.6e12 / 4, the 3-budget ladder's smallest
        ("target_budget", -1.0),
    ],
)
def test_bad_arguments_name_themselves(argument, value):
    arguments = {"target_budget": 1.6e13, "error": 0.01, **SMALL, argument: value}
    with pytest.raises(ValueError, match=f"^{argument} must be"):
        plan_ladder(**arguments)


def test_scaling_forecasts_own_ladder_falls_short_of_1_percent_and_fresh_draws_bear_its_rate_out():
    """scaling_forecast's own shape (4 budgets over 8x, one seed, 0.6% noise a run) lands within 1% at 10x
    in about one draw of ten: after one batch its pass rate's interval lies below 90% and no more are
    drawn. The rate and interval the planner states are borne out by 120 fresh draws it never saw."""
    plan = plan_ladder(1.6e13, 0.01, **{**TARGET, "max_budgets": 5, "max_seeds": 1})
    assert not plan.reachable and "out of reach" in plan.message
    shapes = {(len(c.budgets), c.seeds): c for c in plan.candidates}
    own = shapes[4, 1]
    assert own.verdict == "short" and own.draws == DRAW_BATCH and own.probability <= 0.3
    low, high = own.probability_interval
    fresh = forecast_errors(own.budgets, draws=120, seed=1000).within(0.01)
    assert low <= fresh <= high and abs(fresh - own.probability) < 0.1
    # what the best forecast will say of itself: a 95% interval several percent wide, not 1% nor 30%
    assert 0.02 < plan.interval_width_95 < 0.2 and "95% interval would be about" in plan.message


def bernoulli(rate: float, replicate: int):
    """A stand-in candidate whose draws land within the error (0.0, against 1.0) with ``rate``."""
    hits = np.random.default_rng(replicate).random(MAX_DRAWS) < rate
    return lambda start, count: ForecastErrors(tuple(np.where(hits[start : start + count], 0.0, 1.0)), 0)


def test_a_candidate_is_drawn_until_its_pass_rate_is_clear_of_the_probability():
    """40 draws at 90% asked passed a candidate that lands within the error 85% of the time one time in
    four (on these streams, 23 of 100); drawn until the Wilson interval is clear, at most 2 in 100 pass,
    while one at 97% still passes nearly always, and one at 50% is refused after a single batch."""
    verdict = {}
    for rate in (0.85, 0.97):
        decided = [draws_to_decide(bernoulli(rate, r), 0.5, 0.9, MAX_DRAWS)[1] for r in range(100)]
        assert all(DRAW_BATCH <= d.draws <= MAX_DRAWS for d in decided)
        verdict[rate] = sum(d.verdict(0.9) == "reaches" for d in decided)
    assert verdict[0.85] <= 2 and verdict[0.97] >= 95
    assert sum(bernoulli(0.85, r)(0, 40).within(0.5) >= 0.9 for r in range(100)) > 15  # the old rule's
    weak = draws_to_decide(bernoulli(0.5, 0), 0.5, 0.9, MAX_DRAWS)[1]
    assert weak.verdict(0.9) == "short" and weak.draws == DRAW_BATCH
    capped = draws_to_decide(bernoulli(0.9, 0), 0.5, 0.9, 80)[1]  # at the cap, still undecided
    assert capped.draws == 80 and capped.verdict(0.9) == "undecided"


def test_the_draws_grow_downward_from_one_target_as_a_real_plan_does():
    """A real plan fixes its target and adds budgets below its top; so do the candidates' synthetic ladders:
    one target for all, and the 3-budget candidate's draws are the 4-budget one's runs without its lowest
    budget (the top budget's runs are drawn first), so they differ by the budget added, not by noise."""
    budgets = [1.6e12 / 2**i for i in range(4)]
    four, target = synthetic_budgets(budgets, 10.0)
    assert synthetic_budgets(budgets[:3], 10.0) == (pytest.approx(four[:3]), target)
    assert target / four[0] == pytest.approx(10.0) and four == sorted(four, reverse=True)
    three = forecast_errors(budgets[:3], draws=3)
    truth = synthetic_ladder.optimum(HOFFMANN, target)[1]
    for i, error in enumerate(three.errors):
        runs = synthetic_ladder.ladder(HOFFMANN, four, np.random.default_rng(i), sizes=5, noise=DEFAULT_NOISE)
        top = [r for r in runs if r["budget"] > four[3]]
        assert forecast(top, target, bootstrap=0, cross_check=False).loss / truth - 1 == pytest.approx(error)


def test_a_min_budget_keeps_the_ladder_off_the_plateau_and_says_what_that_costs():
    """On scaling_forecast's text the rungs below 2e11 FLOPs still sit on the unigram plateau: with no
    budget below it, only 3 or 4 budgets fit under 1.6e12, and 1% at 10x is out of reach."""
    plan = plan_ladder(1.6e13, 0.01, **{**SMALL, "max_budgets": 6}, min_budget=2e11)
    assert not plan.reachable and min(plan.budgets) >= 2e11
    below = [c for c in plan.candidates if min(c.budgets) < 2e11]
    assert below and all(c.refused and "below min_budget 2e+11" in c.refused for c in below)
    assert all(c.refused is None for c in plan.candidates if min(c.budgets) >= 2e11)


def test_noise_from_a_file_that_is_no_forecast_names_it(tmp_path):
    other = tmp_path / "result.json"
    other.write_text(json.dumps({"predicted": 2.0}))
    with pytest.raises(ValueError, match="result.json: not a forecast.json"):
        noise_from_forecast(other)


def test_noise_from_an_existing_ladders_forecast(tmp_path):
    budgets = 1e18 * 2.0 ** np.arange(5)
    rng = np.random.default_rng(0)
    for seeds, name in ((3, "seeded.json"), (1, "single.json")):
        runs = synthetic_ladder.ladder(HOFFMANN, budgets, rng, sizes=5, seeds=seeds, noise=0.01)
        record = {"forecast": forecast(runs, 1e20, bootstrap=0, cross_check=False).as_dict()}
        (tmp_path / name).write_text(json.dumps(record))
    noise, note = noise_from_forecast(tmp_path / "seeded.json")
    assert noise == pytest.approx(0.01, rel=0.25) and "seed spread" in note
    noise, note = noise_from_forecast(tmp_path / "single.json")
    assert noise == DEFAULT_NOISE and "no seeds" in note
