"""AdamH: Adam with every weight matrix held on the sphere of its initial norm (train/optimizer.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from pydantic import ValidationError
from resumed import assert_resumes_bit_identically

from marin_pipelines.train.checkpoint import flatten, load_params
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.moe import MoEConfig
from marin_pipelines.train.optimizer import hyperball, learning_rate_schedule, make_optimizer, sphere_mask
from marin_pipelines.train.train_config import TrainConfig

MODEL = LlamaConfig(vocab_size=32, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
ADAMH = TrainConfig(
    optimizer="adamh",
    steps=30,
    batch_size=8,
    learning_rate=0.1,
    warmup_steps=3,
    checkpoint_every=10,
    peak_flops=1e10,
)
PATTERN = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7], np.int32)


def batches(step: int) -> np.ndarray:
    """A periodic stream at random offsets: learnable, so the loss must fall."""
    offsets = np.random.default_rng(step).integers(0, len(PATTERN), ADAMH.batch_size)
    return np.stack([np.resize(np.roll(PATTERN, -o), MODEL.seq_len + 1) for o in offsets])


def norms(params: nnx.State) -> dict[str, float]:
    return {name: float(jnp.linalg.norm(leaf)) for name, leaf in flatten(params).items()}


def initial_params() -> nnx.State:
    return nnx.split(Llama(MODEL, nnx.Rngs(ADAMH.seed)))[1]


def optimise(config: TrainConfig, steps: int, model: LlamaConfig = MODEL) -> tuple[nnx.State, nnx.State]:
    """Initial and final params of ``steps`` updates by ``make_optimizer(config)``, outside the trainer (so
    without the MoE balance bias's own update)."""
    graphdef, params = nnx.split(Llama(model, nnx.Rngs(config.seed)))
    tx = make_optimizer(config)

    def loss(params: nnx.State, batch: jax.Array) -> jax.Array:
        logits = nnx.merge(graphdef, params)(batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    @jax.jit
    def step(params: nnx.State, opt_state: optax.OptState, batch: jax.Array) -> tuple:
        updates, opt_state = tx.update(jax.grad(loss)(params, batch), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    new, opt_state = params, tx.init(params)
    for i in range(steps):
        new, opt_state = step(new, opt_state, jnp.asarray(batches(i)))
    return params, new


def test_every_matrix_is_on_the_sphere_and_norm_scales_are_not():
    mask = flatten(sphere_mask(initial_params()))
    assert mask["embed.embedding"] and mask["lm_head.kernel"] and mask["blocks.1.mlp.w_down.kernel"]
    assert not mask["final_norm.scale"] and not mask["blocks.0.attn_norm.scale"]


def test_adamh_keeps_every_matrix_norm_while_adamw_moves_it():
    adamh = ADAMH.model_copy(update={"steps": 60})
    before, after = (norms(p) for p in optimise(adamh, adamh.steps))
    matrices = [name for name in before if not name.endswith("scale")]
    assert len(matrices) == 2 + 7 * MODEL.n_layers
    for name in matrices:
        assert after[name] == pytest.approx(before[name], rel=1e-5), name

    adamw = adamh.model_copy(update={"optimizer": "adamw", "learning_rate": 1e-2})
    before, after = (norms(p) for p in optimise(adamw, adamw.steps))
    assert all(abs(after[name] / before[name] - 1) > 0.05 for name in matrices)


def test_norm_scales_take_adams_step_at_their_own_learning_rate():
    """Adam's first update is at most 1 per entry (1 unless a gradient nears Adam's eps), so each norm scale
    moves by at most the Adam leaves' learning rate at step 0 (Levanter's adam_lr on the warmup), most by
    exactly that; not by the matrices' angular rate, 50-150x larger."""
    before, after = (flatten(p) for p in optimise(ADAMH, 1))
    step = float(learning_rate_schedule(ADAMH, ADAMH.adam_learning_rate)(0))
    assert step == pytest.approx(6e-4 / ADAMH.warmup_steps)
    for name in before:
        if name.endswith("scale"):
            moved = np.abs(np.asarray(after[name]) - np.asarray(before[name]))
            assert moved.max() <= step * (1 + 1e-3) and np.median(moved) == pytest.approx(step, rel=1e-3), (
                name
            )


def test_the_moe_balance_bias_takes_no_step_at_the_adam_rate():
    """adam_learning_rate's description listed the balance bias among its leaves: it has no gradient (it only
    picks experts), so not even a rate of 1 moves it; its balancing alone does (``moe.rebalance``)."""
    moe = MODEL.model_copy(update={"moe": MoEConfig(experts=4, top_k=2, dropless=True)})
    before, after = (
        flatten(p) for p in optimise(ADAMH.model_copy(update={"adam_learning_rate": 1.0}), 2, moe)
    )
    biases = [name for name in before if name.endswith("router_bias")]
    assert len(biases) == MODEL.n_layers
    for name in biases:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert np.abs(np.asarray(after["final_norm.scale"]) - np.asarray(before["final_norm.scale"])).min() > 0.1


def test_hyperball_needs_the_params():
    tx = hyperball(0.1, 1e-3)
    params = {"w": jnp.ones((2, 2))}
    with pytest.raises(ValueError, match="pass params"):
        tx.update(params, tx.init(params))


def test_adamh_run_learns_and_resumes_bit_identically(tmp_path):
    whole, resumed = assert_resumes_bit_identically(MODEL, ADAMH, batches, tmp_path)
    # 0.78 of the initial loss in 30 steps: the norm scales, which alone set the logits' scale here (every
    # matrix keeps its norm), move at adam_learning_rate
    assert whole["final_loss"] < 0.85 * whole["initial_loss"] and resumed["resumed_from_step"] == 10
    initial, final = norms(initial_params()), norms(load_params(tmp_path / "whole")[1])
    for name in initial:
        if not name.endswith("scale"):
            assert final[name] == pytest.approx(initial[name], rel=1e-5), name


def test_optimizer_is_a_known_one():
    assert TrainConfig().optimizer == "adamw"
    assert TrainConfig(optimizer="adamh", weight_decay=0.1).optimizer == "adamh"  # decay is ignored, no error
    with pytest.raises(ValidationError, match="optimizer"):
        TrainConfig(optimizer="sgd")


def test_adam_learning_rate_is_versioned_where_it_applies_and_survives_a_round_trip():
    """Left out of an AdamW run's dump at its default (so adding it left those versions as they were), in
    AdamH's; a value set on a base config survives a recipe re-validating it as AdamH."""
    assert "adam_learning_rate" not in TrainConfig().model_dump()
    assert TrainConfig(optimizer="adamh").model_dump()["adam_learning_rate"] == 6e-4
    base = TrainConfig(adam_learning_rate=1e-2)
    assert TrainConfig(**{**base.model_dump(), "optimizer": "adamh"}).adam_learning_rate == 1e-2
