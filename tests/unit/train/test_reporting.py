"""A run that reports while it trains (a sweep's trial): the validation loss every N steps, in metrics.jsonl
and to a callback; a callback that stops the run leaves its checkpoint, metrics and curve at that step; a run
that reports trains exactly as one that does not."""

import json

import numpy as np
import optax
import pytest

from marin_pipelines.tokenize.tokenized_cache import TokenCache
from marin_pipelines.train.checkpoint import load_checkpoint, load_params, params_sha256
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.reporting import Reports, StopTraining, ValidationBatches
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import train

MODEL = LlamaConfig(vocab_size=32, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
TRAIN = TrainConfig(
    steps=20, batch_size=8, learning_rate=1e-2, warmup_steps=5, checkpoint_every=10, peak_flops=1e10
)
PATTERN = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7], np.int32)


def batches(step: int) -> np.ndarray:
    """A periodic stream at random offsets: learnable."""
    offsets = np.random.default_rng(step).integers(0, len(PATTERN), TRAIN.batch_size)
    return np.stack([np.resize(np.roll(PATTERN, -o), MODEL.seq_len + 1) for o in offsets])


def validation(index: int) -> np.ndarray:
    return batches(10_000 + index)


def read_metrics(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_validation_loss_is_reported_every_n_steps_and_at_the_last(tmp_path):
    reported = []
    reports = Reports(every=6, on_report=lambda step, metrics: reported.append((step, metrics)), batches=2)
    out = tmp_path / "reported"
    train(MODEL, TRAIN, batches, out, progress=False, validation=validation, reports=reports)

    assert [step for step, _ in reported] == [6, 12, 18, 20]
    metrics = read_metrics(tmp_path / "reported")
    with_val = {m["step"] + 1: m for m in metrics if "val_loss" in m}
    assert sorted(with_val) == [6, 12, 18, 20]
    for step, values in reported:
        assert values.keys() == {"val_loss", "train_loss"}
        assert with_val[step]["val_loss"] == values["val_loss"]
        since = [m["loss"] for m in metrics if step - (step - 1) % 6 - 1 <= m["step"] < step]
        assert values["train_loss"] == pytest.approx(np.mean(since))
    assert reported[-1][1]["val_loss"] < reported[0][1]["val_loss"]

    # the last report is the mean cross-entropy of the final parameters over the two validation batches
    model, _ = load_checkpoint(tmp_path / "reported")
    losses = [
        optax.softmax_cross_entropy_with_integer_labels(model(b[:, :-1]), b[:, 1:]).mean()
        for b in map(validation, range(2))
    ]
    assert reported[-1][1]["val_loss"] == pytest.approx(float(np.mean(losses)), rel=1e-5)

    # and the run trained exactly as one that reports nothing
    train(MODEL, TRAIN, batches, tmp_path / "plain", progress=False)
    plain = read_metrics(tmp_path / "plain")
    assert [m["loss"] for m in plain] == [m["loss"] for m in metrics]
    shas = [params_sha256(load_params(tmp_path / name)[1]) for name in ("plain", "reported")]
    assert shas[0] == shas[1]


def test_a_callback_that_stops_the_run_keeps_its_checkpoint_metrics_and_curve(tmp_path):
    def prune_at_the_second_report(step: int, metrics: dict) -> None:
        if step == 8:
            raise StopTraining("pruned")

    reports = Reports(every=4, on_report=prune_at_the_second_report, batches=1)
    with pytest.raises(StopTraining, match="pruned"):
        train(MODEL, TRAIN, batches, tmp_path, progress=False, validation=validation, reports=reports)

    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [8]  # not 10: it stopped
    metrics = read_metrics(tmp_path)
    assert [m["step"] for m in metrics] == list(range(8))
    assert [m["step"] + 1 for m in metrics if "val_loss" in m] == [4, 8]
    assert (tmp_path / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "train.json").exists()  # a stopped run is not a finished one


def test_reports_need_validation_batches(tmp_path):
    with pytest.raises(ValueError, match="validation batches"):
        train(MODEL, TRAIN, batches, tmp_path, progress=False, reports=Reports(5, lambda s, m: None))


def test_validation_batches_are_fixed_windows_of_the_validation_split(token_cache):
    split = TokenCache(token_cache).validation
    fixed = ValidationBatches(split, seq_len=16, batch_size=4, count=3)
    first = [fixed.rows(i, 0, 4) for i in range(3)]
    assert all(b.shape == (4, 17) and b.dtype == np.int32 for b in first)
    assert all(np.array_equal(a, fixed.rows(i, 0, 4)) for i, a in enumerate(first))
    assert np.array_equal(fixed.rows(1, 2, 4), first[1][2:])
    stream = np.asarray(split)
    assert np.array_equal(first[0][0], stream[:17]) and np.array_equal(first[2][3], stream[-17:])
    with pytest.raises(ValueError, match="validation split of .* fewer than one sequence"):
        ValidationBatches(split, seq_len=len(split), batch_size=1, count=1, where="cache")
