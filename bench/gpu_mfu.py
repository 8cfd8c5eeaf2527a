"""MFU on one GPU: a dense 150M model in bfloat16, the same with FP8 matmuls, and an MoE of the same active
size (8 experts, top-1, each of the dense model's width), routed with a capacity and dropless. Issue 36's
goal: the dense bf16 run at MFU >= 45% (Levanter reports 50-55% on such cards). Each arm's MFU is against the
card's dense bf16 peak (so FP8's gain reads as a ratio to the bf16 arm measured in this same script),
tokens/s beside it. The last line is the cost of dropless routing against capacity: XLA lowers
``ragged_dot`` densely on NVIDIA GPUs (Marin measured it on B200), so dropless runs every expert on every
token's row there, not a grouped matmul.

Run on the GPU machine: ``.venv/bin/python bench/gpu_mfu.py`` (``--peak-tflops`` when the card is not an
H100/H200 SXM, whose dense bf16 peak is 989 TFLOP/s). Random tokens: throughput does not depend on the text.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

VOCAB, SEQ_LEN, BATCH, STEPS = 32_000, 1024, 32, 40
ARMS = {  # name: model fields over the 150m preset
    "dense bf16": {"dtype": "bfloat16"},
    "dense bf16 + fp8 matmuls": {"dtype": "bfloat16", "fp8": True},
    "moe 8x top-1 bf16": {"dtype": "bfloat16", "moe": {"experts": 8, "top_k": 1}},  # capacity factor 1.25
    "moe 8x top-1 bf16 dropless": {"dtype": "bfloat16", "moe": {"experts": 8, "top_k": 1, "dropless": True}},
}


def measure(fields: dict, peak: float) -> dict[str, float]:
    from marin_pipelines.train.model import LlamaConfig, preset
    from marin_pipelines.train.train_config import TrainConfig
    from marin_pipelines.train.trainer import train

    model = LlamaConfig(**{**preset("150m", VOCAB, SEQ_LEN).model_dump(), **fields})
    config = TrainConfig(
        steps=STEPS, batch_size=BATCH, warmup_steps=2, checkpoint_every=STEPS, log_every=10, peak_flops=peak
    )

    def batches(step: int) -> np.ndarray:
        return np.random.default_rng(step).integers(0, VOCAB, (BATCH, SEQ_LEN + 1), dtype=np.int32)

    with tempfile.TemporaryDirectory() as out:
        began = time.perf_counter()
        summary = train(model, config, batches, Path(out), progress=False)
        lines = (Path(out) / "metrics.jsonl").read_text().splitlines()
    tokens_per_s = statistics.median(json.loads(line)["tokens_per_s"] for line in lines[5:])  # compiled
    return {
        "params": summary["params"],
        "active_params": summary["active_params"],
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * model.flops_per_token() / peak,
        "hardware": summary["hardware"],
        "wall_s": time.perf_counter() - began,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the card's dense bf16 peak")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    peak = args.peak_tflops * 1e12
    results: dict[str, dict] = {}
    for name, fields in ARMS.items():  # an arm that fails (FP8 on some jaxlib) still lets the rest report
        try:
            results[name] = measure(fields, peak)
        except Exception as error:  # noqa: BLE001 - a bench reports what broke and goes on
            results[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
        print(name, json.dumps(results[name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    base = results["dense bf16"].get("tokens_per_s")
    print(f"{'arm':<28}{'params':>14}{'active':>14}{'tokens/s':>12}{'MFU':>8}{'vs bf16':>9}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<28} failed: {r['error']}")
            continue
        ratio = f"{r['tokens_per_s'] / base:>8.2f}x" if base else ""
        print(
            f"{name:<28}{r['params']:>14,}{r['active_params']:>14,}{r['tokens_per_s']:>12,.0f}{r['mfu']:>8.1%}"
            + ratio
        )
    capacity, dropless = (
        results[name].get("tokens_per_s") for name in ("moe 8x top-1 bf16", "moe 8x top-1 bf16 dropless")
    )
    if capacity and dropless:
        print(f"dropless routing costs {capacity / dropless:.2f}x the step time of capacity 1.25 routing")
    print(f"batch {BATCH} x {SEQ_LEN}, vocab {VOCAB}, {STEPS} steps; card: ", end="")
    print(next((r["hardware"] for r in results.values() if "hardware" in r), "unknown"))


if __name__ == "__main__":
    main()
