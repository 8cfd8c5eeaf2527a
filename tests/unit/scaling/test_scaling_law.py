import json

import numpy as np
import pytest
from pydantic import ValidationError

from marin_pipelines.scaling.scaling_law import (
    LadderConfig,
    ScalingLaw,
    budget_key,
    fit_scaling_law,
    ladder_steps,
)
from marin_pipelines.train.model import preset
from marin_pipelines.train.train_config import TrainConfig

TRUE = {"A": 40.0, "alpha": 0.08, "beta": 0.12}


def synthetic_runs(sizes, tokens, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {
            "params": n,
            "tokens": d,
            "flops": 6 * n * d,
            "loss": TRUE["A"]
            * n ** -TRUE["alpha"]
            * d ** -TRUE["beta"]
            * float(np.exp(noise * rng.normal())),
        }
        for n in sizes
        for d in tokens
    ]


def test_ladder_steps_spend_the_budget():
    assert ladder_steps(1e12, 1e6, 2048) == round(1e6 / 2048)
    assert ladder_steps(1e6 * 2048 * 10.4, 1e6, 2048) == 10
    assert ladder_steps(1.0, 1e6, 2048) == 1
    with pytest.raises(ValueError, match="budget_flops"):
        ladder_steps(0, 1e6, 2048)


def test_budget_keys_keep_three_significant_figures():
    assert [budget_key(b) for b in (5e10, 1.5e11, 2e11, 4e12)] == ["5e10", "1.5e11", "2e11", "4e12"]
    LadderConfig(budgets=[1.5e11, 2e11])  # one significant figure would name both "2e11"
    with pytest.raises(ValidationError, match="3 significant figures"):
        LadderConfig(budgets=[1e11, 1.0001e11])


def test_ladder_plan_covers_sizes_times_budgets():
    ladder = LadderConfig(sizes=["nano", "micro"], budgets=[1e12, 3e12], batch_size=8)
    base = TrainConfig(seed=5, weight_decay=0.0)
    runs = ladder.plan(vocab_size=512, seq_len=64, base=base)
    assert [(r.size, r.budget_flops) for r in runs] == [
        ("nano", 1e12),
        ("nano", 3e12),
        ("micro", 1e12),
        ("micro", 3e12),
    ]
    assert [r.name for r in runs] == ["nano-1e12", "nano-3e12", "micro-1e12", "micro-3e12"]
    for run in runs:
        assert run.model == preset(run.size, 512, 64)
        spent = run.train.steps * 8 * 64 * run.model.flops_per_token()
        assert spent == pytest.approx(run.budget_flops, rel=0.01)
        assert run.train.warmup_steps == int(0.1 * run.train.steps)
        assert (run.train.batch_size, run.train.seed, run.train.weight_decay) == (8, 5, 0.0)
    assert {run.train.learning_rate for run in runs} == {3e-3}
    # inverse_width: micro (d_model 96) gets 64/96 of the reference LR, nano (d_model 64) all of it.
    scaled = ladder.model_copy(update={"lr_rule": "inverse_width"})
    assert scaled.run("micro", 1e12, 512, 64).train.learning_rate == pytest.approx(3e-3 * 64 / 96)
    assert scaled.run("nano", 1e12, 512, 64).train.learning_rate == pytest.approx(3e-3)


def test_default_ladder_is_the_cpu_demo():
    ladder = LadderConfig()
    runs = ladder.plan(vocab_size=4096, seq_len=128)
    assert [(r.size, r.train.steps) for r in runs] == [
        ("nano", 77),
        ("nano", 309),
        ("micro", 45),
        ("micro", 181),
    ]


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"sizes": ["nano", "gigantic"]}, "unknown model sizes \\['gigantic'\\]"),
        ({"budgets": [1e12, -1]}, "budgets"),
    ],
)
def test_ladder_config_errors_name_the_field(update, field):
    with pytest.raises(ValidationError, match=field):
        LadderConfig(**{"sizes": ["nano"], "budgets": [1e12], **update})


@pytest.mark.parametrize(("sizes", "tokens"), [([2e5, 4e5], [1e6, 3e6]), ([1e5, 3e5, 1e6], [1e6, 2e6, 8e6])])
def test_noiseless_runs_are_recovered_exactly(sizes, tokens):
    law = fit_scaling_law(synthetic_runs(sizes, tokens))
    assert (law.A, law.alpha, law.beta) == pytest.approx((TRUE["A"], TRUE["alpha"], TRUE["beta"]), rel=1e-8)
    assert law.r2 == pytest.approx(1.0) and np.allclose(law.residuals, 0, atol=1e-10)
    assert law.n_runs == len(sizes) * len(tokens)
    assert law.predict(1e7, 1e9) == pytest.approx(TRUE["A"] * 1e7**-0.08 * 1e9**-0.12, rel=1e-8)


def test_small_noise_gives_a_close_fit():
    law = fit_scaling_law(synthetic_runs([1e5, 3e5, 1e6], [1e6, 3e6, 1e7], noise=0.005, seed=1))
    assert law.alpha == pytest.approx(TRUE["alpha"], abs=0.02)
    assert law.beta == pytest.approx(TRUE["beta"], abs=0.02)
    assert law.r2 > 0.95 and 0 < max(abs(r) for r in law.residuals) < 0.02


def test_as_dict_round_trips_through_json():
    law = fit_scaling_law(synthetic_runs([1e5, 1e6], [1e6, 1e7]))
    assert ScalingLaw(**{**json.loads(json.dumps(law.as_dict())), "residuals": law.residuals}) == law


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        (synthetic_runs([1e5, 1e6], [1e6]), "at least 3 runs, got 2"),
        (synthetic_runs([1e5], [1e6, 2e6, 4e6]), "2 distinct params and 2 distinct tokens"),
        (synthetic_runs([1e5, 2e5, 4e5], [1e6, 2e6, 4e6])[::4], "collinear"),
        ([{**r, "loss": -1.0} for r in synthetic_runs([1e5, 1e6], [1e6, 1e7])], "loss must be positive"),
    ],
)
def test_degenerate_ladders_are_refused(runs, message):
    with pytest.raises(ValueError, match=message):
        fit_scaling_law(runs)
