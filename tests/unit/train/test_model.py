import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from pydantic import ValidationError

from marin_pipelines.train.model import (
    MODEL_SIZES,
    Llama,
    LlamaConfig,
    apply_rope,
    attention_implementation,
    preset,
)

SMALL = LlamaConfig(vocab_size=50, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48)


def real_param_count(config: LlamaConfig) -> int:
    model = nnx.eval_shape(lambda: Llama(config, nnx.Rngs(0)))
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_num_params_matches_the_model(tie, kv_heads, qk_norm):
    config = SMALL.model_copy(update={"tie_embeddings": tie, "n_kv_heads": kv_heads, "qk_norm": qk_norm})
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
    assert 0.9e9 <= preset("1b", 32_000, 2048).num_params() <= 1.2e9
    with pytest.raises(ValueError, match="'huge' is not one of"):
        preset("huge", 4096, 128)


def test_flops_per_token_by_hand():
    """Levanter's lm_flops_per_token (glu=True) x 3, written out as it is there."""
    hidden, inter, layers, kv_heads, heads, seq, vocab = 32, 48, 2, 2, 4, 16, 50
    head_dim = hidden / heads
    mlp = 2 * 3 * hidden * inter
    qkv_proj = 2 * hidden * (heads * head_dim + 2 * kv_heads * head_dim)
    dense_proj = 2 * hidden * hidden
    attn = (2 * seq**2 * heads * head_dim + 3 * seq * seq * heads + 2 * seq * seq * head_dim * heads) / seq
    expected = 3 * (layers * (mlp + qkv_proj + dense_proj + attn) + 2 * hidden * vocab)
    assert SMALL.flops_per_token() == pytest.approx(expected, rel=1e-12)
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


def test_qk_norm_and_bfloat16_compute_stay_close_to_the_reference():
    tokens = jnp.asarray(np.random.default_rng(3).integers(0, 50, (2, 16)), jnp.int32)
    qk = SMALL.model_copy(update={"qk_norm": True})
    reference = Llama(qk, nnx.Rngs(0))(tokens)
    assert not np.allclose(reference, Llama(SMALL, nnx.Rngs(0))(tokens), atol=1e-4)  # the norm acts
    half = Llama(qk.model_copy(update={"dtype": "bfloat16"}), nnx.Rngs(0))
    logits = half(tokens)
    assert logits.dtype == jnp.float32 and half.blocks[0].attn.wq.kernel.value.dtype == jnp.float32
    np.testing.assert_allclose(logits, reference, atol=0.05)


def test_cudnn_attention_only_on_gpus_in_half_precision():
    """cuDNN's fused attention is asked for on a GPU in bf16/fp16 with a head_dim it takes; a CPU keeps
    JAX's choice (the same numbers as before it was chosen), whatever the dtype."""

    def q(dtype, head_dim=64):
        return jnp.zeros((1, 4, 2, head_dim), dtype)

    assert attention_implementation(q(jnp.bfloat16), "gpu") == "cudnn"
    assert attention_implementation(q(jnp.float16), "gpu") == "cudnn"
    assert attention_implementation(q(jnp.float32), "gpu") is None
    assert attention_implementation(q(jnp.bfloat16, head_dim=256), "gpu") is None
    assert attention_implementation(q(jnp.bfloat16, head_dim=60), "gpu") is None
    assert attention_implementation(q(jnp.bfloat16), "cpu") is None
    if jax.default_backend() == "cpu":  # the tests' machine: the model's own choice is JAX's
        assert attention_implementation(q(jnp.bfloat16)) is None
