"""FP8 matmuls with current scaling (train/fp8.py), checked against float32 on the CPU, which emulates FP8;
the trainer refuses model.fp8 on a CPU."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from marin_pipelines.train.fp8 import BACKWARD, FORWARD, fp8_dot_general, fp8_matmul, quantize
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import train

X = jax.random.normal(jax.random.key(0), (4, 16, 64)) * 3.0
W = jax.random.normal(jax.random.key(1), (64, 32)) * 0.02


def relative_error(a: jax.Array, b: jax.Array) -> float:
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def test_quantize_maps_the_absolute_maximum_to_the_formats_largest():
    for dtype in (FORWARD, BACKWARD):
        q, scale = quantize(X, dtype)
        assert q.dtype == dtype and float(jnp.abs(q.astype(jnp.float32)).max()) == float(jnp.finfo(dtype).max)
        assert relative_error(q.astype(jnp.float32) * scale, X) < (0.04 if dtype == FORWARD else 0.08)


def test_fp8_matmul_and_its_gradients_match_float32_within_fp8_precision():
    assert relative_error(fp8_matmul(X, W), X @ W) < 0.05

    def loss(matmul, x, w):
        return jnp.sum(jnp.sin(matmul(x, w)))

    fp8_grads = jax.grad(lambda x, w: loss(fp8_matmul, x, w), argnums=(0, 1))(X, W)
    exact = jax.grad(lambda x, w: loss(jnp.matmul, x, w), argnums=(0, 1))(X, W)
    for got, want in zip(fp8_grads, exact, strict=True):
        assert got.shape == want.shape and 0 < relative_error(got, want) < 0.1  # quantised, and close


def test_an_fp8_model_computes_the_float32_models_loss_and_gradient_closely():
    """Weights scaled 10x so that the logits are far from uniform (at initialisation every model's loss is
    about log V, whatever FP8 does): the loss agrees within FP8's precision, and so does the gradient the
    optimiser follows, quantised (not equal) but pointing the same way."""
    config = LlamaConfig(vocab_size=64, seq_len=16, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=128)
    fp8 = config.model_copy(update={"fp8": True})
    tokens = jax.random.randint(jax.random.key(2), (4, 17), 0, 64)
    graphdef, params = nnx.split(Llama(config, nnx.Rngs(0)))
    fp8_graphdef, _ = nnx.split(Llama(fp8, nnx.Rngs(0)))  # the same parameters: fp8 changes no weight
    params = jax.tree.map(lambda p: 10 * p if p.ndim == 2 else p, params)

    def loss(graphdef, params):
        logits = nnx.merge(graphdef, params)(tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    exact = float(loss(graphdef, params))
    assert exact > 1.2 * math.log(64)
    assert float(loss(fp8_graphdef, params)) == pytest.approx(exact, rel=1e-2)
    flat = [
        jnp.concatenate([leaf.ravel() for leaf in jax.tree.leaves(jax.grad(loss, argnums=1)(g, params))])
        for g in (fp8_graphdef, graphdef)
    ]
    assert 0.01 < relative_error(*flat) < 0.3
    assert float(flat[0] @ flat[1] / (jnp.linalg.norm(flat[0]) * jnp.linalg.norm(flat[1]))) > 0.95


def test_fp8_dot_general_takes_linear_layers_only():
    with pytest.raises(ValueError, match="x @ kernel only"):
        fp8_dot_general(W, X, (((0,), (2,)), ((), ())))


def test_the_trainer_refuses_fp8_on_a_cpu_naming_the_field(tmp_path):
    config = LlamaConfig(
        vocab_size=8, seq_len=4, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=8, fp8=True
    )
    with pytest.raises(ValueError, match="model.fp8: FP8 matmuls need a GPU.*devices are cpu"):
        train(
            config,
            TrainConfig(steps=1, warmup_steps=0),
            lambda s: np.zeros((16, 5), np.int32),
            tmp_path / "r",
        )
    assert not (tmp_path / "r").exists()
