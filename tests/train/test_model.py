import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from pydantic import ValidationError

from marin_pipelines.train.model import MODEL_SIZES, Llama, LlamaConfig, apply_rope, preset

SMALL = LlamaConfig(vocab_size=50, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48)


def real_param_count(config: LlamaConfig) -> int:
    model = nnx.eval_shape(lambda: Llama(config, nnx.Rngs(0)))
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_num_params_matches_the_model(tie, kv_heads):
    config = SMALL.model_copy(update={"tie_embeddings": tie, "n_kv_heads": kv_heads})
    assert config.num_params() == real_param_count(config)
    embeddings = config.vocab_size * config.d_model * (1 if tie else 2)
    assert config.num_params(include_embeddings=False) == config.num_params() - embeddings


@pytest.mark.parametrize("name", sorted(MODEL_SIZES))
def test_presets_count_their_params(name):
    config = preset(name, vocab_size=4096, seq_len=128)
    assert (config.vocab_size, config.seq_len) == (4096, 128)
    assert config.num_params() == real_param_count(config)


def test_presets_grow_and_nano_is_nano():
    counts = [preset(name, 4096, 128).num_params(include_embeddings=False) for name in MODEL_SIZES]
    assert counts == sorted(counts)
    assert 0.1e6 <= counts[0] <= 0.3e6
    assert 15e6 <= preset("20m", 4096, 128).num_params(include_embeddings=False) <= 25e6
    with pytest.raises(ValueError, match="'huge' is not one of"):
        preset("huge", 4096, 128)


def test_flops_per_token_by_hand():
    d, kv, ff, layers, vocab, seq = 32, 2 * 8, 48, 2, 50, 16
    per_layer = d * d + 2 * d * kv + d * d + 3 * d * ff
    expected = 6 * (layers * per_layer + vocab * d) + 6 * layers * seq * d
    assert SMALL.flops_per_token() == expected
    # The LM head matmul costs the same whether or not it is tied.
    assert SMALL.model_copy(update={"tie_embeddings": True}).flops_per_token() == expected


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"n_heads": 5}, "d_model \\(32\\) must be divisible by n_heads \\(5\\)"),
        ({"n_kv_heads": 3}, "n_heads \\(4\\) must be divisible by n_kv_heads \\(3\\)"),
        ({"d_model": 36, "n_heads": 12, "n_kv_heads": 1}, "head_dim"),
        ({"vocab_size": 0}, "vocab_size"),
    ],
)
def test_config_errors_name_the_field(update, message):
    with pytest.raises(ValidationError, match=message):
        LlamaConfig(**{**SMALL.model_dump(), **update})


def test_forward_shapes_init_and_determinism():
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 50, (3, 16)), jnp.int32)
    logits = Llama(SMALL, nnx.Rngs(0))(tokens)
    assert logits.shape == (3, 16, 50) and logits.dtype == jnp.float32
    np.testing.assert_array_equal(logits, Llama(SMALL, nnx.Rngs(0))(tokens))
    assert not np.allclose(logits, Llama(SMALL, nnx.Rngs(1))(tokens))
    # Small init: predictions start near uniform, so the loss is near ln V.
    log_probs = jax.nn.log_softmax(logits[:, :-1])
    loss = -jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1).mean()
    assert abs(float(loss) - math.log(50)) < 0.1


@pytest.mark.parametrize("tie", [False, True])
def test_attention_is_causal(tie):
    model = Llama(SMALL.model_copy(update={"tie_embeddings": tie}), nnx.Rngs(0))
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 50, (1, 12)), jnp.int32)
    changed = tokens.at[0, 7].set((tokens[0, 7] + 1) % 50)
    before, after = model(tokens), model(changed)
    np.testing.assert_allclose(before[0, :7], after[0, :7], atol=1e-6)
    assert not np.allclose(before[0, 7:], after[0, 7:], atol=1e-4)


def test_rope_scores_depend_only_on_relative_position():
    rng = np.random.default_rng(2)
    q1, k1 = (jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32) for _ in range(2))
    # The same q and k at every position: score(i, j) must be a function of i - j alone.
    q = apply_rope(jnp.tile(q1, (1, 10, 1, 1)), 10_000.0)[0, :, 0]
    k = apply_rope(jnp.tile(k1, (1, 10, 1, 1)), 10_000.0)[0, :, 0]
    scores = np.asarray(q @ k.T)
    np.testing.assert_allclose(scores[5, 2], scores[8, 5], rtol=1e-5)
    np.testing.assert_allclose(scores[3, 3], float(q1.ravel() @ k1.ravel()), rtol=1e-5)
    assert not np.isclose(scores[5, 2], scores[5, 3])
