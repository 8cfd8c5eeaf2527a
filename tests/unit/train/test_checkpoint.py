import json
import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from pydantic import ValidationError

from marin_pipelines.train.checkpoint import load_checkpoint, load_params, params_sha256
from marin_pipelines.train.model import Llama, LlamaConfig
from marin_pipelines.train.optimizer import decay_mask, learning_rate_schedule
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import train

MODEL = LlamaConfig(vocab_size=32, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
TRAIN = TrainConfig(
    steps=40,
    batch_size=8,
    learning_rate=1e-2,
    warmup_steps=5,
    log_every=10,
    checkpoint_every=10,
    peak_flops=1e10,
)
PATTERN = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7], np.int32)


def repeating_batches(step: int) -> np.ndarray:
    """A periodic stream at random offsets: learnable, so the loss must fall."""
    offsets = np.random.default_rng(step).integers(0, len(PATTERN), TRAIN.batch_size)
    return np.stack([np.resize(np.roll(PATTERN, -o), MODEL.seq_len + 1) for o in offsets])


def read_metrics(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("ckpt")
    return out_dir, train(MODEL, TRAIN, repeating_batches, out_dir, progress=False)


def test_cosine_warms_up_then_decays_to_the_floor():
    config = TrainConfig(steps=100, learning_rate=1.0, warmup_steps=10, min_lr_ratio=0.1)
    lr = np.array([float(learning_rate_schedule(config)(s)) for s in range(100)])
    assert lr[0] == pytest.approx(0.1)
    assert lr[9] == pytest.approx(1.0) and lr[10] == pytest.approx(1.0)
    assert lr[99] == pytest.approx(0.1)
    assert np.all(np.diff(lr[:10]) > 0) and np.all(np.diff(lr[10:]) < 0)


def test_wsd_holds_the_peak_then_decays_linearly_over_the_last_fraction():
    config = TrainConfig(
        steps=100, learning_rate=1.0, warmup_steps=10, min_lr_ratio=0.0, lr_schedule="wsd", decay_fraction=0.2
    )
    lr = np.array([float(learning_rate_schedule(config)(s)) for s in range(100)])
    assert np.all(np.diff(lr[:10]) > 0)
    np.testing.assert_allclose(lr[9:81], 1.0)
    assert lr[99] == pytest.approx(0.0, abs=1e-7)
    np.testing.assert_allclose(np.diff(lr[80:]), -1 / 19, rtol=1e-5)


def test_weight_decay_skips_norms_and_embeddings():
    model = Llama(MODEL.model_copy(update={"qk_norm": True}), nnx.Rngs(0))
    mask = dict((p, v.get_value()) for p, v in nnx.to_flat_state(decay_mask(nnx.state(model))))
    assert mask[("embed", "embedding")] is False
    assert mask[("final_norm", "scale")] is False and mask[("blocks", 0, "mlp_norm", "scale")] is False
    assert mask[("blocks", 0, "attn", "q_norm", "scale")] is False
    assert mask[("blocks", 1, "attn", "wq", "kernel")] is True and mask[("lm_head", "kernel")] is True


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"warmup_steps": 50, "steps": 10}, "warmup_steps"),
        ({"learning_rate": -1}, "learning_rate"),
        ({"beta2": 1}, "beta2"),
        ({"lr_schedule": "linear"}, "lr_schedule"),
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
    assert summary["params"] == MODEL.num_params() and summary["skipped_updates"] == 0
    assert summary["flops"] == MODEL.flops_per_token() * summary["tokens_seen"]
    assert summary["tokens_per_s"] > 0 and summary["mfu"] > 0

    metrics = read_metrics(out_dir)
    assert [m["step"] for m in metrics] == list(range(TRAIN.steps))
    assert {"loss", "z_loss", "grad_norm", "lr", "tokens_per_s", "mfu", "skipped"} <= metrics[0].keys()
    assert summary["final_loss"] == pytest.approx(np.mean([m["loss"] for m in metrics[-10:]]))
    assert metrics[TRAIN.warmup_steps - 1]["lr"] == pytest.approx(TRAIN.learning_rate)

    recorded = json.loads((out_dir / "train.json").read_text())
    assert TrainConfig(**recorded["config"]) == TRAIN and recorded["summary"] == summary
    assert LlamaConfig.model_validate_json((out_dir / "model.json").read_text()) == MODEL
    assert (out_dir / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # keep_last=2 of the checkpoints every 10 steps.
    assert sorted(int(p.name) for p in (out_dir / "checkpoints").iterdir()) == [30, 40]


def test_rerunning_a_finished_run_leaves_its_record_as_it_was(run):
    """Nothing is left to train: the run's summary stands (a rerun used to add an empty layout segment and
    record the throughput of no step)."""
    out_dir, summary = run
    before = (out_dir / "train.json").read_bytes()
    assert train(MODEL, TRAIN, repeating_batches, out_dir, progress=False) == {
        **summary,
        "resumed_from_step": TRAIN.steps,
    }
    assert (out_dir / "train.json").read_bytes() == before and len(summary["layouts"]) == 1


def test_keep_every_makes_permanent_checkpoints(tmp_path):
    config = TRAIN.model_copy(update={"steps": 12, "checkpoint_every": 2, "keep_last": 1, "keep_every": 4})
    train(MODEL, config, repeating_batches, tmp_path, progress=False)
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [4, 8, 12]


def test_interrupted_run_resumes_bit_identically(run, tmp_path):
    """Also the reproducibility test: two runs from the same seed, in one process, same bits."""

    def crashing(step: int) -> np.ndarray:
        if step == 25:
            raise KeyboardInterrupt
        return repeating_batches(step)

    with pytest.raises(KeyboardInterrupt):
        train(MODEL, TRAIN, crashing, tmp_path, progress=False)
    assert len(read_metrics(tmp_path)) == 25
    first_start = json.loads((tmp_path / "started.json").read_text())["started_at"]
    summary = train(MODEL, TRAIN, repeating_batches, tmp_path, progress=False)
    assert summary["resumed_from_step"] == 20
    # the run's start is its first one: a forecast written during the crash was written after it started
    assert summary["started_at"] == first_start != run[1]["started_at"]
    assert params_sha256(load_params(run[0])[1]) == params_sha256(load_params(tmp_path)[1])
    assert [m["loss"] for m in read_metrics(tmp_path)] == [m["loss"] for m in read_metrics(run[0])]


def test_resume_refuses_a_different_config_or_fewer_steps(run, tmp_path):
    ten = TRAIN.model_copy(update={"steps": 10, "warmup_steps": 2})
    train(MODEL, ten, repeating_batches, tmp_path, progress=False)
    with pytest.raises(ValueError, match="another train config .*warmup_steps"):
        train(MODEL, TRAIN, repeating_batches, tmp_path, progress=False)
    model_file = (tmp_path / "model.json").read_text()
    with pytest.raises(ValueError, match="another model config .*n_layers"):
        train(MODEL.model_copy(update={"n_layers": 3}), ten, repeating_batches, tmp_path, progress=False)
    assert (tmp_path / "model.json").read_text() == model_file  # what loads the checkpoint reads it
    # fewer steps than the checkpoint's: refused, and train.json still describes the checkpoint of step 10
    record = (tmp_path / "train.json").read_text()
    with pytest.raises(ValueError, match="at step 10, past the 6 steps asked"):
        train(MODEL, ten.model_copy(update={"steps": 6}), repeating_batches, tmp_path, progress=False)
    assert (tmp_path / "train.json").read_text() == record


def test_trained_checkpoint_loads_and_predicts_the_pattern(run):
    model, config = load_checkpoint(run[0])
    assert config == MODEL
    batch = jnp.asarray(repeating_batches(10_000))
    predictions = np.asarray(model(batch[:, :-1]).argmax(-1))
    # After a few periods of context the next token is determined by the pattern.
    assert (predictions[:, 8:] == np.asarray(batch[:, 9:])).mean() > 0.9


def test_load_rejects_params_of_another_model(run, tmp_path):
    (tmp_path / "checkpoints").symlink_to(run[0] / "checkpoints")
    (tmp_path / "model.json").write_text(MODEL.model_copy(update={"n_layers": 3}).model_dump_json())
    with pytest.raises(ValueError, match="missing \\['blocks.2."):
        load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a training directory"):
        load_checkpoint(tmp_path / "nowhere")


def test_bad_batches_are_refused(tmp_path):
    short = TRAIN.model_copy(update={"steps": 2, "warmup_steps": 0})
    with pytest.raises(ValueError, match=r"batch_fn\(0\) gave int32\[8, 16\]; expected int32\[8, 17\]"):
        train(MODEL, short, lambda step: repeating_batches(step)[:, :-1], tmp_path, progress=False)
    with pytest.raises(ValueError, match="outside \\[0, 32\\)"):
        train(MODEL, short, lambda step: repeating_batches(step) + 40, tmp_path / "b", progress=False)


def test_a_loss_spike_is_skipped_and_recorded(tmp_path):
    """Random tokens after 30 steps of a learnt pattern: the loss jumps, the update is not applied."""
    config = TRAIN.model_copy(update={"steps": 32, "spike_window": 8, "spike_sigma": 6.0})
    noise = np.random.default_rng(0).integers(0, MODEL.vocab_size, (TRAIN.batch_size, MODEL.seq_len + 1))
    summary = train(
        MODEL, config, lambda s: noise if s == 30 else repeating_batches(s), tmp_path, progress=False
    )
    metrics = read_metrics(tmp_path)
    assert [m["step"] for m in metrics if m["skipped"]] == [30]
    assert summary["skipped_updates"] == 1
    assert metrics[30]["loss"] > 3 * metrics[29]["loss"] and metrics[31]["loss"] < 2 * metrics[29]["loss"]


def test_non_finite_updates_are_skipped_then_the_run_stops(tmp_path):
    exploding = TRAIN.model_copy(update={"learning_rate": 1e30, "warmup_steps": 0, "weight_decay": 0.0})
    with pytest.raises(RuntimeError, match="10 bad updates in a row .* at step [1-9]"):
        train(MODEL, exploding, repeating_batches, tmp_path, progress=False)
    assert read_metrics(tmp_path)[-1]["skipped"] is True


def test_z_loss_pulls_the_log_normaliser_to_zero(run, tmp_path):
    config = TRAIN.model_copy(update={"z_loss_weight": 0.1, "steps": 20})
    train(MODEL, config, repeating_batches, tmp_path, progress=False)
    assert read_metrics(tmp_path)[-1]["z_loss"] < 0.5 * read_metrics(run[0])[19]["z_loss"]
