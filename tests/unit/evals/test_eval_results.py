import math

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from marin_pipelines.evals.eval_results import evaluate_bpb
from marin_pipelines.train.checkpoint import load_checkpoint
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import train

VOCAB = 40
MODEL = LlamaConfig(vocab_size=VOCAB, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
TOKEN_BYTES = np.random.default_rng(0).integers(1, 5, VOCAB)
TOKEN_BYTES[0] = 0  # an EOS-like special: no bytes, still predicted


@nnx.jit
def _direct_nll(model: Llama, inputs: jnp.ndarray, targets: jnp.ndarray) -> jnp.ndarray:
    return optax.softmax_cross_entropy_with_integer_labels(model(inputs), targets).sum()


def nll_sum(model: Llama, window: np.ndarray) -> float:
    """Summed next-token loss over one window, computed directly over its full length."""
    return float(_direct_nll(model, jnp.asarray(window[None, :-1]), jnp.asarray(window[None, 1:])))


@pytest.fixture(scope="module")
def model() -> Llama:
    return Llama(MODEL, nnx.Rngs(0))


def test_random_model_costs_log2_vocab_bits_per_token(model):
    tokens = np.random.default_rng(1).integers(0, VOCAB, 1000)
    result = evaluate_bpb(model, tokens, TOKEN_BYTES, seq_len=16, batch_size=8)
    assert result["tokens"] == 999
    assert result["bytes"] == TOKEN_BYTES[tokens[1:]].sum()
    assert result["loss"] == pytest.approx(math.log(VOCAB), rel=0.02)
    assert result["bits_per_byte"] == pytest.approx(math.log2(VOCAB) * 999 / result["bytes"], rel=0.02)


def test_one_window_is_the_full_sequence(model):
    tokens = np.random.default_rng(2).integers(0, VOCAB, 13)
    result = evaluate_bpb(model, tokens, TOKEN_BYTES, seq_len=16, batch_size=4)
    assert result["loss"] * result["tokens"] == pytest.approx(nll_sum(model, tokens), rel=1e-5)


@pytest.mark.parametrize(("seq_len", "batch_size"), [(5, 3), (4, 1)])
def test_every_token_after_the_first_is_predicted_once(model, seq_len, batch_size):
    tokens = np.random.default_rng(3).integers(0, VOCAB, 50)
    result = evaluate_bpb(model, tokens, TOKEN_BYTES, seq_len=seq_len, batch_size=batch_size)
    # Windows overlap by one token: [0, T], [T, 2T], ... and a short last one.
    expected = sum(nll_sum(model, tokens[start : start + seq_len + 1]) for start in range(0, 49, seq_len))
    assert result["tokens"] == 49
    assert result["loss"] * 49 == pytest.approx(expected, rel=1e-5)
    assert result["bits_per_byte"] == pytest.approx(
        expected / math.log(2) / TOKEN_BYTES[tokens[1:]].sum(), rel=1e-5
    )


def test_training_lowers_bits_per_byte(model, tmp_path):
    stream = np.resize(np.array([5, 17, 3, 3, 29, 11, 0, 8, 21], np.int32), 4000)
    config = TrainConfig(steps=40, batch_size=8, learning_rate=1e-2, warmup_steps=4)

    def batch_fn(step: int) -> np.ndarray:
        starts = np.random.default_rng(step).integers(0, len(stream) - MODEL.seq_len - 1, config.batch_size)
        return np.stack([stream[s : s + MODEL.seq_len + 1] for s in starts])

    train(MODEL, config, batch_fn, tmp_path, progress=False)
    trained, _ = load_checkpoint(tmp_path)
    held_out = stream[4:604]
    before = evaluate_bpb(model, held_out, TOKEN_BYTES, seq_len=16, batch_size=8)
    after = evaluate_bpb(trained, held_out, TOKEN_BYTES, seq_len=16, batch_size=8)
    assert after["tokens"] == before["tokens"] and after["bytes"] == before["bytes"]
    assert after["bits_per_byte"] < 0.5 * before["bits_per_byte"]


def test_bad_inputs_are_refused(model):
    with pytest.raises(ValueError, match="at least 2 tokens"):
        evaluate_bpb(model, np.array([1]), TOKEN_BYTES, seq_len=8, batch_size=2)
    with pytest.raises(ValueError, match="token ids must lie in \\[0, 40\\)"):
        evaluate_bpb(model, np.array([1, 40]), TOKEN_BYTES, seq_len=8, batch_size=2)
    with pytest.raises(ValueError, match="zero bytes"):
        evaluate_bpb(model, np.array([1, 0, 0]), TOKEN_BYTES, seq_len=8, batch_size=2)
