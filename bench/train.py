"""Training throughput on this machine: tokens/s and MFU of the tiny and ~20M-parameter models.

MFU = tokens/s x FLOPs per token (Levanter's accounting) / peak FLOP/s. The peak is measured here,
right before each model, as the best matmul throughput of this host (the CPU is shared, so a peak
from another moment would not compare). Run: ``.venv/bin/python bench/train.py``.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import numpy as np

from marin_pipelines.train.model import preset
from marin_pipelines.train.throughput import measure_matmul_peak
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import train

VOCAB = 4096
RUNS = {  # name: (size, seq_len, batch_size, steps)
    "tiny (1.1M)": ("tiny", 128, 16, 30),
    "20m (19M)": ("20m", 256, 8, 12),
}


def random_batches(batch_size: int, seq_len: int):
    def batch(step: int) -> np.ndarray:
        return np.random.default_rng(step).integers(0, VOCAB, (batch_size, seq_len + 1), dtype=np.int32)

    return batch


def bench(size: str, seq_len: int, batch_size: int, steps: int) -> dict[str, float]:
    model = preset(size, VOCAB, seq_len)
    peak = statistics.median(measure_matmul_peak.__wrapped__(1024, 5)[0] for _ in range(3))
    config = TrainConfig(
        steps=steps,
        batch_size=batch_size,
        warmup_steps=1,
        checkpoint_every=steps,
        peak_flops=peak,
        log_every=steps,
    )
    with tempfile.TemporaryDirectory() as out:
        train(model, config, random_batches(batch_size, seq_len), Path(out), progress=False)
        lines = (Path(out) / "metrics.jsonl").read_text().splitlines()
    tokens_per_s = statistics.median(json.loads(line)["tokens_per_s"] for line in lines[1:])  # after compile
    return {
        "params": model.num_params(),
        "peak_gflops": peak / 1e9,
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * model.flops_per_token() / peak,
    }


def main() -> None:
    print(f"{'model':<14}{'params':>12}{'peak GFLOP/s':>14}{'tokens/s':>12}{'MFU':>8}")
    for name, run in RUNS.items():
        r = bench(*run)
        print(
            f"{name:<14}{r['params']:>12,}{r['peak_gflops']:>14.1f}{r['tokens_per_s']:>12.0f}{r['mfu']:>8.1%}"
        )


if __name__ == "__main__":
    main()
