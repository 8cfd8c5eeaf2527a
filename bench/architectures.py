"""What the new architectures cost per step on this machine, each as a ratio to its peer measured here too:

- MoE (4 experts, top-1: the dense model's active parameters) vs dense: capacity 1.25, and dropless;
- Muon vs AdamW on the dense model;
- tokens/s and MFU of the dense model on 1, 2 and 4 (forced host) CPU devices, data parallel.

Median step time over the steps after the first (which compiles). MFU counts active parameters against
the host's measured matmul peak (the forced devices share the same cores). Run:
``.venv/bin/python bench/architectures.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

VOCAB, SEQ_LEN, BATCH, STEPS = 4096, 128, 16, 20
MOE = {"experts": 4, "top_k": 1}
ARMS = {  # name: (model changes, train changes)
    "dense adamw": ({}, {}),
    "moe capacity 1.25": ({"moe": {**MOE, "capacity_factor": 1.25}}, {}),
    "moe dropless": ({"moe": {**MOE, "dropless": True}}, {}),
    "dense muon": ({}, {"optimizer": "muon"}),
}
PEERS = {"moe capacity 1.25": "dense adamw", "moe dropless": "dense adamw", "dense muon": "dense adamw"}


def step_seconds(model_changes: dict, train_changes: dict) -> tuple[float, float]:
    """Median seconds per step and the model's training FLOPs per step."""
    from marin_pipelines.train.model import LlamaConfig, preset
    from marin_pipelines.train.train_config import TrainConfig
    from marin_pipelines.train.trainer import train

    model = LlamaConfig(**{**preset("tiny", VOCAB, SEQ_LEN).model_dump(), **model_changes})
    config = TrainConfig(
        steps=STEPS,
        batch_size=BATCH,
        warmup_steps=1,
        checkpoint_every=STEPS,
        log_every=STEPS,
        peak_flops=1e12,
    )
    config = config.model_copy(update=train_changes)

    def batches(step: int) -> np.ndarray:
        return np.random.default_rng(step).integers(0, VOCAB, (BATCH, SEQ_LEN + 1), dtype=np.int32)

    with tempfile.TemporaryDirectory() as out:
        train(model, config, batches, Path(out), progress=False)
        lines = (Path(out) / "metrics.jsonl").read_text().splitlines()
    seconds = statistics.median(json.loads(line)["step_seconds"] for line in lines[1:])
    return seconds, model.flops_per_token() * BATCH * SEQ_LEN


def devices_child() -> None:
    seconds, flops = step_seconds({}, {})
    print(json.dumps({"seconds": seconds, "flops": flops}))


def on_devices(count: int) -> dict[str, float]:
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}"
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, __file__, "--devices-child"], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def row(name: str, seconds: float, mfu: float) -> str:
    return f"{name:<20}{seconds:>9.4f}{BATCH * SEQ_LEN / seconds:>10.0f}{mfu:>8.1%}"


def main() -> None:
    from marin_pipelines.train.throughput import measure_matmul_peak

    peak = statistics.median(measure_matmul_peak.__wrapped__(1024, 5)[0] for _ in range(3))
    print(f"host matmul peak {peak / 1e9:.1f} GFLOP/s; tiny preset, batch {BATCH} x {SEQ_LEN}, vocab {VOCAB}")
    print(f"{'arm':<20}{'s/step':>9}{'tokens/s':>10}{'MFU':>8}{'vs peer':>9}")
    measured = {}
    for name, (model_changes, train_changes) in ARMS.items():
        seconds, flops = step_seconds(model_changes, train_changes)
        measured[name] = seconds
        ratio = f"{seconds / measured[PEERS[name]]:.2f}x" if name in PEERS else "peer"
        print(row(name, seconds, flops / seconds / peak) + f"{ratio:>9}")
    print(f"\n{'devices':<20}{'s/step':>9}{'tokens/s':>10}{'MFU':>8}{'vs 1':>9}")
    one = None
    for count in (1, 2, 4):
        result = on_devices(count)
        one = one or result["seconds"]
        seconds = result["seconds"]
        print(row(str(count), seconds, result["flops"] / seconds / peak) + f"{one / seconds:>8.2f}x")


if __name__ == "__main__":
    devices_child() if "--devices-child" in sys.argv else main()
