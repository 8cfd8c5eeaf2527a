import json
import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from pydantic import ValidationError

from marin_pipelines.train.checkpoint import (
    TrainConfig,
    _decay_mask,
    learning_rate_schedule,
    load_checkpoint,
    save_checkpoint,
    train,
)
from marin_pipelines.train.model import Llama, LlamaConfig

MODEL = LlamaConfig(vocab_size=32, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
TRAIN = TrainConfig(steps=40, batch_size=8, learning_rate=1e-2, warmup_steps=5, log_every=10)
PATTERN = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7], np.int32)


def repeating_batches(step: int) -> np.ndarray:
    """A periodic stream at random offsets: learnable, so the loss must fall."""
    offsets = np.random.default_rng(step).integers(0, len(PATTERN), TRAIN.batch_size)
    return np.stack([np.resize(np.roll(PATTERN, -o), MODEL.seq_len + 1) for o in offsets])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("ckpt")
    return out_dir, train(MODEL, TRAIN, repeating_batches, out_dir, progress=False)


def test_schedule_warms_up_then_decays_to_the_floor():
    config = TrainConfig(steps=100, learning_rate=1.0, warmup_steps=10, min_lr_ratio=0.1)
    lr = np.array([float(learning_rate_schedule(config)(s)) for s in range(100)])
    assert lr[0] == pytest.approx(0.1)
    assert lr[9] == pytest.approx(1.0) and lr[10] == pytest.approx(1.0)
    assert lr[99] == pytest.approx(0.1)
    assert np.all(np.diff(lr[:10]) > 0) and np.all(np.diff(lr[10:]) < 0)


def test_weight_decay_skips_norms_and_embeddings():
    mask = dict(
        (p, v.get_value()) for p, v in nnx.to_flat_state(_decay_mask(nnx.state(Llama(MODEL, nnx.Rngs(0)))))
    )
    assert mask[("embed", "embedding")] is False
    assert mask[("final_norm", "scale")] is False and mask[("blocks", 0, "mlp_norm", "scale")] is False
    assert mask[("blocks", 1, "attn", "wq", "kernel")] is True and mask[("lm_head", "kernel")] is True


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"warmup_steps": 50, "steps": 10}, "warmup_steps"),
        ({"learning_rate": -1}, "learning_rate"),
        ({"beta2": 1}, "beta2"),
    ],
)
def test_train_config_errors_name_the_field(update, field):
    with pytest.raises(ValidationError, match=field):
        TrainConfig(**update)


def test_training_learns_and_writes_a_checkpoint(run):
    out_dir, summary = run
    assert summary["initial_loss"] == pytest.approx(math.log(MODEL.vocab_size), abs=0.2)
    assert summary["final_loss"] < 0.5 * summary["initial_loss"]
    assert summary["tokens_seen"] == TRAIN.steps * TRAIN.batch_size * MODEL.seq_len
    assert summary["params"] == MODEL.num_params()
    assert summary["flops"] == MODEL.flops_per_token() * summary["tokens_seen"]
    assert summary["tokens_per_s"] > 0 and 0 < summary["mfu"] < 1

    metrics = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(TRAIN.steps))
    assert {"loss", "grad_norm", "lr", "tokens_per_s", "mfu"} <= metrics[0].keys()
    assert summary["final_loss"] == pytest.approx(np.mean([m["loss"] for m in metrics[-10:]]))
    assert metrics[TRAIN.warmup_steps - 1]["lr"] == pytest.approx(TRAIN.learning_rate)

    recorded = json.loads((out_dir / "train.json").read_text())
    assert TrainConfig(**recorded["config"]) == TRAIN and recorded["summary"] == summary
    assert LlamaConfig.model_validate_json((out_dir / "model.json").read_text()) == MODEL
    assert (out_dir / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_seed_gives_bit_identical_params(run, tmp_path):
    out_dir, _ = run
    train(MODEL, TRAIN, repeating_batches, tmp_path, progress=False)
    with np.load(out_dir / "params.npz") as first, np.load(tmp_path / "params.npz") as second:
        assert first.files == second.files and "blocks/0/attn/wq/kernel" in first.files
        for key in first.files:
            np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_trained_checkpoint_loads_and_predicts_the_pattern(run):
    model, config = load_checkpoint(run[0])
    assert config == MODEL
    batch = jnp.asarray(repeating_batches(10_000))
    predictions = np.asarray(model(batch[:, :-1]).argmax(-1))
    # After a few periods of context the next token is determined by the pattern.
    assert (predictions[:, 8:] == np.asarray(batch[:, 9:])).mean() > 0.9


@pytest.mark.parametrize("tie", [False, True])
def test_save_then_load_restores_logits_exactly(tie, tmp_path):
    config = MODEL.model_copy(update={"tie_embeddings": tie})
    model = Llama(config, nnx.Rngs(7))
    tokens = jnp.asarray(repeating_batches(0)[:, :-1])
    save_checkpoint(model, tmp_path)
    restored, restored_config = load_checkpoint(tmp_path)
    assert restored_config == config
    np.testing.assert_array_equal(model(tokens), restored(tokens))


def test_load_rejects_params_of_another_model(tmp_path):
    save_checkpoint(Llama(MODEL, nnx.Rngs(0)), tmp_path)
    bigger = MODEL.model_copy(update={"n_layers": 3})
    (tmp_path / "model.json").write_text(bigger.model_dump_json())
    with pytest.raises(ValueError, match="missing \\['blocks/2/"):
        load_checkpoint(tmp_path)


def test_bad_batches_are_refused(tmp_path):
    short = TRAIN.model_copy(update={"steps": 2, "warmup_steps": 0})
    with pytest.raises(ValueError, match=r"batch_fn\(0\) gave int32\[8, 16\]; expected int32\[8, 17\]"):
        train(MODEL, short, lambda step: repeating_batches(step)[:, :-1], tmp_path, progress=False)
    with pytest.raises(ValueError, match="outside \\[0, 32\\)"):
        train(MODEL, short, lambda step: repeating_batches(step) + 40, tmp_path, progress=False)


def test_non_finite_loss_stops_with_the_step(tmp_path):
    exploding = TRAIN.model_copy(update={"learning_rate": 1e30, "warmup_steps": 0, "weight_decay": 0.0})
    with pytest.raises(RuntimeError, match="non-finite loss .* at step [1-9]"):
        train(MODEL, exploding, repeating_batches, tmp_path, progress=False)
