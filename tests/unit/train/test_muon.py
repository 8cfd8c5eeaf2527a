"""Muon on the blocks' hidden weight matrices, AdamW on the rest (train/optimizer.py)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from pydantic import ValidationError
from resumed import assert_resumes_bit_identically

from marin_pipelines.train.checkpoint import flatten
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.optimizer import (
    MUON_MOMENTUM,
    MUON_RMS,
    learning_rate_schedule,
    make_optimizer,
    muon_labels,
)
from marin_pipelines.train.train_config import TrainConfig

MODEL = LlamaConfig(vocab_size=32, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
MUON = TrainConfig(
    optimizer="muon",
    steps=30,
    batch_size=8,
    learning_rate=2e-2,
    warmup_steps=3,
    checkpoint_every=10,
    peak_flops=1e10,
)
PATTERN = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7], np.int32)
NS_COEFFS = (3.4445, -4.775, 2.0315)  # Jordan's quintic, optax's default


def batches(step: int) -> np.ndarray:
    """A periodic stream at random offsets: learnable, so the loss must fall."""
    offsets = np.random.default_rng(step).integers(0, len(PATTERN), MUON.batch_size)
    return np.stack([np.resize(np.roll(PATTERN, -o), MODEL.seq_len + 1) for o in offsets])


def newton_schulz(x: np.ndarray) -> np.ndarray:
    """Five quintic steps on the Frobenius-normalized matrix, on its wide orientation."""
    a, b, c = NS_COEFFS
    tall = x.shape[0] > x.shape[1]
    x = (x.T if tall else x) / (np.linalg.norm(x) + 1e-8)
    for _ in range(5):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def reference_updates(config: TrainConfig, weight: np.ndarray, grads: list[np.ndarray]) -> list[np.ndarray]:
    """Muon in float64: clip, Nesterov momentum with optax's bias correction, orthogonalize, scale to RMS
    0.2 (Moonlight), decoupled weight decay, times the schedule's learning rate."""
    schedule, beta, mu, out = learning_rate_schedule(config), MUON_MOMENTUM, np.zeros_like(weight), []
    for t, grad in enumerate(grads, start=1):
        grad = grad * min(1.0, config.grad_clip / np.linalg.norm(grad))
        mu = beta * mu + (1 - beta) * grad
        nesterov = beta * mu / (1 - beta ** (t + 1)) + (1 - beta) * grad / (1 - beta**t)
        ortho = newton_schulz(nesterov) * MUON_RMS * math.sqrt(max(weight.shape))
        out.append(-float(schedule(t - 1)) * (ortho + config.weight_decay * weight))
        weight = weight + out[-1]
    return out


def run_updates(tx: optax.GradientTransformation, params: dict, grads: list[dict]) -> list[dict]:
    state, out = tx.init(params), []
    for grad in grads:
        update, state = tx.update(grad, state, params)
        params = optax.apply_updates(params, update)
        out.append(update)
    return out


def in_block(leaf: np.ndarray) -> dict:
    return {"blocks": {0: {"attn": {"wq": {"kernel": jnp.asarray(leaf, jnp.float32)}}}}}


def test_muon_update_matches_a_numpy_reference_and_is_orthogonal():
    rng = np.random.default_rng(0)
    config = TrainConfig(optimizer="muon", steps=10, warmup_steps=0, learning_rate=0.02, weight_decay=0.1)
    weight = 0.02 * rng.standard_normal((8, 16))
    grads = [rng.standard_normal((8, 16)), rng.standard_normal((8, 16))]  # norm ~11: clipped to 1
    updates = run_updates(make_optimizer(config), in_block(weight), [in_block(g) for g in grads])
    got = [np.asarray(u["blocks"][0]["attn"]["wq"]["kernel"], np.float64) for u in updates]
    for ours, want in zip(got, reference_updates(config, weight, grads), strict=True):
        np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-7)

    # optax's own Muon with Moonlight's consistent RMS 0.2 is the same rule on a matrix.
    optax_muon = optax.chain(
        optax.clip_by_global_norm(config.grad_clip),
        optax.contrib.muon(
            learning_rate_schedule(config), beta=MUON_MOMENTUM, weight_decay=0.1, consistent_rms=MUON_RMS
        ),
    )
    theirs = run_updates(optax_muon, in_block(weight), [in_block(g) for g in grads])
    np.testing.assert_allclose(got[1], theirs[1]["blocks"][0]["attn"]["wq"]["kernel"], rtol=1e-5, atol=1e-8)

    # The step (decay taken out) is near-orthogonal at RMS ~0.2 x lr; the raw gradient is far from it.
    ortho = -got[0] / config.learning_rate - config.weight_decay * weight
    singular = np.linalg.svd(ortho / (MUON_RMS * 4), compute_uv=False)  # sqrt(max(8, 16)) = 4
    assert singular.min() > 0.6 and singular.max() < 1.2, singular
    assert np.sqrt(np.mean(ortho**2)) == pytest.approx(MUON_RMS, rel=0.2)
    raw = np.linalg.svd(grads[0], compute_uv=False)
    assert raw.max() / raw.min() > 3


def test_block_matrices_go_to_muon_and_embedding_head_and_norms_to_adam():
    model = MODEL.model_copy(update={"qk_norm": True})
    labels = flatten(muon_labels(nnx.split(Llama(model, nnx.Rngs(0)))[1]))
    muon = {name for name, label in labels.items() if label == "muon"}
    adam = {name for name, label in labels.items() if label == "adam"}
    assert muon == {
        f"blocks.{i}.{part}.kernel"
        for i in range(model.n_layers)
        for part in ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w_gate", "mlp.w_up", "mlp.w_down")
    }
    assert {"embed.embedding", "lm_head.kernel", "final_norm.scale"} <= adam
    assert all(name.endswith("scale") for name in adam - {"embed.embedding", "lm_head.kernel"})
    assert len(adam) == 3 + 4 * model.n_layers  # + attn, mlp, q and k norms per layer


def test_moe_experts_are_a_batch_of_matrices_and_a_dead_router_bias_stays_put():
    """3-D experts [experts, d_in, d_out]: each expert orthogonalized and scaled on its own; the router
    (2-D kernel, 1-D bias) and the embedding on AdamW as under adamw; the bias, zero gradient, never moves."""
    rng = np.random.default_rng(1)
    config = TrainConfig(optimizer="muon", steps=10, warmup_steps=0, learning_rate=0.02, grad_clip=1e9)
    experts = 0.02 * rng.standard_normal((3, 8, 16))

    def moe(w_up: np.ndarray, router: np.ndarray, bias: np.ndarray, embed: np.ndarray) -> dict:
        mlp = {"w_up": w_up, "router": {"kernel": router}, "router_bias": bias}
        return jax.tree.map(jnp.asarray, {"blocks": {0: {"mlp": mlp}}, "embed": {"embedding": embed}})

    params = moe(experts, rng.standard_normal((8, 3)), np.ones(3), rng.standard_normal((32, 8)))
    labels = flatten(muon_labels(params))
    assert labels == {
        "blocks.0.mlp.w_up": "muon",
        "blocks.0.mlp.router.kernel": "adam",
        "blocks.0.mlp.router_bias": "adam",
        "embed.embedding": "adam",
    }
    scales = np.array([1.0, 1e-3, 1e3])[:, None, None]  # per-expert normalization: scale must not matter
    grads = [
        moe(
            scales * rng.standard_normal((3, 8, 16)),
            rng.standard_normal((8, 3)),
            np.zeros(3),
            np.ones((32, 8)),
        )
        for _ in range(2)
    ]
    updates = run_updates(make_optimizer(config), params, grads)
    for expert in range(3):
        want = reference_updates(
            config, experts[expert], [np.asarray(g["blocks"][0]["mlp"]["w_up"][expert]) for g in grads]
        )
        for update, expected in zip(updates, want, strict=True):
            np.testing.assert_allclose(
                update["blocks"][0]["mlp"]["w_up"][expert], expected, rtol=1e-4, atol=1e-7
            )
    for update in updates:  # the bias is 1, so a weight decay would move it
        assert not np.any(update["blocks"][0]["mlp"]["router_bias"])
    # Adam's first step is -lr x sign(grad), plus the decay on kernels only (decay_mask), not the embedding.
    lr, decay = config.learning_rate, config.weight_decay
    router, router_grad = (
        params["blocks"][0]["mlp"]["router"]["kernel"],
        grads[0]["blocks"][0]["mlp"]["router"],
    )
    want = -lr * (np.sign(router_grad["kernel"]) + decay * np.asarray(router))
    np.testing.assert_allclose(updates[0]["blocks"][0]["mlp"]["router"]["kernel"], want, rtol=1e-5)
    np.testing.assert_allclose(updates[0]["embed"]["embedding"], -lr, rtol=1e-5)


def test_muon_run_learns_and_resumes_bit_identically(tmp_path):
    whole, resumed = assert_resumes_bit_identically(MODEL, MUON, batches, tmp_path)
    assert whole["final_loss"] < 0.6 * whole["initial_loss"] and resumed["resumed_from_step"] == 10


def test_optimizer_must_be_adamw_adamh_or_muon():
    assert TrainConfig(optimizer="muon").optimizer == "muon"
    with pytest.raises(ValidationError, match="'adamw', 'adamh' or 'muon'"):
        TrainConfig(optimizer="sgd")
