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
    forecast_errors,
    noise_from_forecast,
    plan_ladder,
)
from marin_pipelines.scaling.synthetic_ladder import HOFFMANN

# scaling_forecast's ladder: its recipe constants, vocabulary and target
TARGET = {"recipe": LADDER["recipe"], "vocab_size": 512, "seq_len": 128}
SMALL = {**TARGET, "max_budgets": 4, "max_seeds": 2, "draws": 8}  # a few candidates, a few draws


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


def test_a_loose_error_gets_the_cheapest_ladder_that_reaches_it():
    plan = plan_ladder(1.6e13, 0.05, **SMALL)
    assert plan.reachable and plan.probability >= 0.9 and "out of reach" not in plan.message
    meeting = [c for c in plan.candidates if c.probability is not None and c.probability >= 0.9]
    assert plan.ladder_flops == min(c.ladder_flops for c in meeting)
    assert len(plan.candidates) == 2 * 2  # 3 and 4 budgets, 1 and 2 seeds
    assert json.loads(json.dumps(plan.as_dict()))["ladder"]["seeds"] == plan.seeds


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
        ("draws", 0),
        ("max_ladder_ratio", 0.0),
        ("min_budget", 1e12),  # above 1.6e12 / 4, the 3-budget ladder's smallest
        ("target_budget", -1.0),
    ],
)
def test_bad_arguments_name_themselves(argument, value):
    arguments = {"target_budget": 1.6e13, "error": 0.01, **SMALL, argument: value}
    with pytest.raises(ValueError, match=f"^{argument} must be"):
        plan_ladder(**arguments)


def test_scaling_forecasts_target_needs_about_seven_budgets_and_three_seeds():
    """The headline: within 1% at 10x in 90% of draws, at scaling_forecast's measured 0.6% noise a run,
    takes a ladder over 64x with 3 seeds a size; its own 4 budgets and one seed reach 1% in 1 draw of 10
    (bench/ladder_power.py's figures, the same function)."""
    plan = plan_ladder(1.6e13, 0.01, **TARGET, probability=0.9, draws=40)
    assert plan.reachable and plan.probability >= 0.9
    assert 6 <= len(plan.budgets) <= 8 and 2 <= plan.seeds <= 3
    shapes = {(len(c.budgets), c.seeds): c for c in plan.candidates}
    assert shapes[4, 1].probability <= 0.3  # scaling_forecast's own shape
    assert shapes[4, 1].probability == forecast_errors(2.0 ** np.arange(4)).within(0.01)
    # and what that forecast will say of itself: a 95% interval a few percent wide, not 1% nor 20%
    assert 0.01 < plan.interval_width_95 < 0.06 and "95% interval would be about" in plan.message


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
