"""Scaling recipes: budget in, a valid run out, by the stated heuristics; pure pydantic, no training."""

import json
import math

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from marin_pipelines.scaling.recipe import (
    RECIPES,
    AnyRecipe,
    ConstantRecipe,
    DelphiRecipe,
    RecipeRun,
    recipe,
)
from marin_pipelines.scaling.scaling_law import LadderConfig, LadderRun
from marin_pipelines.train.model import preset
from marin_pipelines.train.train_config import TrainConfig

VOCAB, SEQ = 4096, 128
DECADES = [1e11, 1e12, 1e13, 1e14]


def delphi_runs() -> list[RecipeRun]:
    return [
        recipe("delphi").run(b, v, s) for b in DECADES for v, s in ((2048, 128), (4096, 256), (8192, 512))
    ]


def test_same_inputs_give_equal_runs():
    a, b = (recipe("delphi").run(1e13, VOCAB, SEQ) for _ in range(2))
    assert a == b and a.model_dump_json() == b.model_dump_json() and a.describe() == b.describe()
    assert isinstance(a, LadderRun) and a.name == f"{a.size}-1e13"
    json.dumps(a.describe())  # metadata as is


def test_runs_validate_and_follow_the_schedule_heuristics():
    r = recipe("delphi")
    for run in delphi_runs():
        t = run.train
        assert TrainConfig.model_validate(t.model_dump()) == t
        assert type(run.model).model_validate(run.model.model_dump()) == run.model
        assert r.min_steps <= t.steps and 0 < t.warmup_steps < t.steps
        assert t.warmup_steps == round(0.1 * t.steps)
        assert (t.lr_schedule, t.decay_fraction, t.min_lr_ratio) == ("wsd", 0.2, 0.0)
        assert t.batch_size & (t.batch_size - 1) == 0  # a power of two
        assert run.tokens == t.steps * t.batch_size * run.model.seq_len
        assert run.optimizer == "adamw" == t.optimizer


def test_heads_and_shape_follow_the_stated_constants():
    r = recipe("delphi")
    shapes = r.shapes(VOCAB, SEQ)[:64] + [run.model for run in delphi_runs()]
    for m in shapes:
        assert m.d_model % m.n_heads == 0 and m.n_heads % m.n_kv_heads == 0
        assert m.head_dim == r.head_dim == 16
        assert m.n_kv_heads == m.n_heads  # no GQA
        assert m.n_layers == max(2, math.floor(m.d_model / 32 + 0.5))
        assert m.d_ff % 32 == 0 and 8 / 3 * m.d_model <= m.d_ff < 8 / 3 * m.d_model + 32
    params = [m.num_params(include_embeddings=False) for m in r.shapes(VOCAB, SEQ)]
    assert np.all(np.diff(params) > 0)
    grouped = recipe("delphi", kv_group=2).shape(128, VOCAB, SEQ)
    assert (grouped.n_heads, grouped.n_kv_heads) == (8, 4)


def test_flops_accounting_spends_the_budget():
    for run in delphi_runs():
        assert run.flops == run.model.flops_per_token() * run.tokens
        assert run.flops == pytest.approx(run.budget, rel=0.03)


def test_default_ratio_is_chinchilla_within_a_shape_step():
    for run in delphi_runs():
        assert 20 / 2.5 < run.tokens_per_param < 20 * 2.5
        assert run.tokens_per_param == run.tokens / run.params


def test_monotone_in_budget():
    r = recipe("delphi")
    fine = [r.run(float(b), VOCAB, SEQ) for b in 10 ** np.arange(11, 14.01, 0.25)]
    assert np.all(np.diff([x.params for x in fine]) >= 0)
    # Tokens grow with the budget within a shape and dip at a switch to the next, larger shape (shapes
    # are discrete); at half a decade apart they never fall.
    half = [r.run(float(b), VOCAB, SEQ) for b in 10 ** np.arange(11, 14.01, 0.5)]
    assert np.all(np.diff([x.tokens for x in half]) >= 0)
    assert half[-1].params > half[0].params


def test_learning_rate_falls_with_width_at_fixed_batch():
    r = recipe("delphi")
    widths = [m.d_model for m in r.shapes(VOCAB, SEQ)[:32]]
    lrs = [r.peak_learning_rate(d, 2048, 1e6) for d in widths]
    assert np.all(np.diff(lrs) < 0)
    assert r.peak_learning_rate(64, 2048, 2**18) == 3e-3  # the reference point
    assert r.peak_learning_rate(64, 4 * 2048, 2**18) == pytest.approx(6e-3)  # sqrt(batch)
    assert r.peak_learning_rate(16, 2**20, 1.0) == r.max_learning_rate  # capped


def test_token_horizon_correction_is_exactly_applied():
    fixed = recipe("delphi", min_batch_size=16, max_batch_size=16)
    short, long = (fixed.run(b, VOCAB, SEQ, params=5e4) for b in (1e12, 4e12))
    assert short.model == long.model and short.train.batch_size == long.train.batch_size == 16
    assert long.tokens > 3 * short.tokens
    ratio = long.train.learning_rate / short.train.learning_rate
    assert ratio == pytest.approx((short.tokens / long.tokens) ** 0.3, rel=1e-12)
    d = short.model.d_model
    expected = 3e-3 * (64 / d) * math.sqrt(16 * SEQ / 2048) * (2**18 / short.tokens) ** 0.3
    assert short.train.learning_rate == pytest.approx(expected, rel=1e-12)


def test_beta2_keeps_the_token_half_life():
    r = recipe("delphi")
    for run in delphi_runs():
        batch_tokens = run.train.batch_size * run.model.seq_len
        beta2 = run.train.beta2
        if r.min_beta2 < beta2 < r.max_beta2:
            assert batch_tokens * math.log(0.5) / math.log(beta2) == pytest.approx(r.half_life_tokens)
    assert r.beta2(1) == r.max_beta2 and r.beta2(2**30) == r.min_beta2
    assert recipe("delphi", half_life_tokens=2048 / math.log2(1 / 0.95)).beta2(2048) == pytest.approx(0.95)


def test_isoflop_sweep_gives_distinct_shapes_at_the_budget():
    r = recipe("delphi")
    budget = 1e13
    sweep = [r.run(budget, VOCAB, SEQ, params=p) for p in (2.5e4, 1e5, 3e5, 1e6)]
    assert len({(x.model.d_model, x.model.n_layers) for x in sweep}) == 4
    assert len({x.name for x in sweep}) == 4
    assert [x.params for x in sweep] == sorted(x.params for x in sweep)
    for x, p in zip(sweep, (2.5e4, 1e5, 3e5, 1e6), strict=True):
        assert x.flops == pytest.approx(budget, rel=0.03)
        assert p / 2 < x.params < p * 2


def test_constant_recipe_is_the_ladder_rule():
    base = TrainConfig(seed=3)
    for size, budget in (("nano", 5e11), ("micro", 2e12)):
        n = preset(size, VOCAB, SEQ).num_params(include_embeddings=False)
        run = recipe("constant").run(budget, VOCAB, SEQ, params=n, base=base)
        rung = LadderConfig().run(size, budget, VOCAB, SEQ, base)
        assert (run.size, run.name, run.model, run.train) == (rung.size, rung.name, rung.model, rung.train)
        assert run.tokens == run.train.steps * 16 * SEQ and run.recipe == "constant"
    # By ratio it picks the named size nearest 20 tokens/param, with the same one batch and LR.
    run = recipe("constant").run(1e14, VOCAB, SEQ)
    assert run.size in ConstantRecipe().sizes and run.train.learning_rate == 3e-3
    assert run.train.batch_size == 16


def test_base_fields_the_recipe_does_not_set_are_kept():
    run = recipe("delphi").run(1e12, VOCAB, SEQ, base=TrainConfig(seed=7, log_every=5, weight_decay=0.5))
    assert (run.train.seed, run.train.log_every, run.train.weight_decay) == (7, 5, 0.1)


@pytest.mark.parametrize("optimizer", ["adamh", "muon"])
def test_optimizer_reaches_train_config(optimizer):
    run = recipe("delphi", optimizer=optimizer, width_exponent=0.0).run(1e12, VOCAB, SEQ)
    assert run.optimizer == run.train.optimizer == optimizer
    assert run.describe()["optimizer"] == optimizer


def test_recipes_are_named_configs_with_overridable_constants():
    assert sorted(RECIPES) == ["constant", "delphi"]
    with pytest.raises(
        ValueError, match=r"unknown recipe 'chinchilla'; known recipes: \['constant', 'delphi'\]"
    ):
        recipe("chinchilla")
    with pytest.raises(ValidationError, match="aspect"):
        recipe("delphi", aspect=64)  # a misspelt constant

    class Ladder(BaseModel):
        recipe: AnyRecipe = DelphiRecipe()

    ladder = Ladder.model_validate({"recipe": {"name": "delphi", "head_dim": 32}})
    assert ladder.recipe == recipe("delphi", head_dim=32)
    assert Ladder.model_validate_json(ladder.model_dump_json()) == ladder
    assert ladder.model_dump_json() != Ladder().model_dump_json()  # the override versions the step
    assert Ladder.model_validate({"recipe": {"name": "constant"}}).recipe == ConstantRecipe()


def test_bad_requests_are_clear_errors():
    r = recipe("delphi")
    with pytest.raises(ValueError, match=r"no shape near 20 tokens/param at budget 1e\+10 FLOPs"):
        r.run(1e10, VOCAB, SEQ)
    with pytest.raises(
        ValueError, match=r"budget 3e\+09 FLOPs is .* needs at least 20 steps, a budget of at least"
    ):
        r.run(3e9, VOCAB, SEQ, params=8e3)
    with pytest.raises(ValueError, match="no shape near 1e\\+12 params"):
        r.run(1e13, VOCAB, SEQ, params=1e12)
    with pytest.raises(ValueError, match="not both"):
        r.run(1e13, VOCAB, SEQ, params=1e5, tokens_per_param=20)
    with pytest.raises(ValueError, match="positive and finite"):
        r.run(-1.0, VOCAB, SEQ)
