"""Packed chat examples: a token attends only within its own example and counts its positions from 0, so a
packed row gives every example the loss it has alone."""

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from marin_pipelines.tokenize.chat_data import ChatStats, pack
from marin_pipelines.train.model import Llama, LlamaConfig, segment_positions

CONFIG = LlamaConfig(vocab_size=50, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48)


@nnx.jit
def _losses(model: Llama, tokens: jnp.ndarray, segments: jnp.ndarray | None) -> jnp.ndarray:
    """Compiled once per row length: run op by op, the model takes seconds a call on a CPU."""
    logits = model(tokens[:, :-1], None if segments is None else segments[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])[0]


def nll(model: Llama, tokens: np.ndarray, segments: np.ndarray | None = None) -> np.ndarray:
    """Next-token losses of one row: position t predicts t + 1."""
    return np.asarray(
        _losses(model, jnp.asarray(tokens[None]), None if segments is None else jnp.asarray(segments[None]))
    )


def test_segment_positions_restart_at_each_example():
    segments = jnp.array([[1, 1, 1, 2, 2, 3, 0, 0]])
    assert segment_positions(segments).tolist() == [[0, 1, 2, 0, 1, 0, 0, 1]]


def test_a_packed_row_gives_each_example_its_own_loss():
    model = Llama(CONFIG, nnx.Rngs(0))
    rng = np.random.default_rng(0)
    examples = [rng.integers(1, 50, n).astype(np.int32) for n in (5, 7, 4)]
    (row,) = pack([(e, np.ones(len(e), bool)) for e in examples], CONFIG.seq_len, ChatStats())
    packed = nll(model, row.tokens, row.segments)
    weights = row.target_weights
    for k, example in enumerate(examples, 1):
        alone = nll(model, example).mean()
        mine = (row.segments[1:] == k) & (weights > 0)
        assert mine.sum() == len(example) - 1
        np.testing.assert_allclose(packed[mine].mean(), alone, rtol=1e-5)
    # without the segments, later examples see the earlier ones: their losses change
    crossing = nll(model, row.tokens)
    second = (row.segments[1:] == 2) & (weights > 0)
    assert not np.allclose(crossing[second].mean(), packed[second].mean(), rtol=1e-5)


def test_one_segment_is_the_plain_causal_model():
    model = Llama(CONFIG, nnx.Rngs(1))
    tokens = np.random.default_rng(1).integers(0, 50, 17).astype(np.int32)
    np.testing.assert_allclose(
        nll(model, tokens, np.ones(17, np.int32)), nll(model, tokens), rtol=1e-5, atol=1e-6
    )
