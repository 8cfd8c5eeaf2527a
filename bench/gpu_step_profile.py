"""Where a GPU training step of ``gpu_mfu.py``'s dense 150M model spends its time: the trainer's jitted
step run back to back on one resident batch (no host work between steps), the same with its state donated,
forward + backward alone, forward alone, and forward + backward with XLA's attention in place of the cuDNN
attention the model picks on GPUs, each against the card's dense bf16 peak. A perfetto trace of three full
steps goes to ``--trace-dir``, whose kernels ``--summarise TRACE`` sums by name.

Run on the GPU machine when ``gpu_mfu.py`` finds the trainer below its MFU goal. Its first run (README, GPU
section) found XLA's attention taking 60% of the step.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

VOCAB, SEQ_LEN, BATCH, REPEATS = 32_000, 1024, 32, 10


def _timed(fn: Any, *args: Any) -> float:
    """Median-free best of ``REPEATS`` back-to-back calls' mean, after one compiling call."""
    import jax

    jax.block_until_ready(fn(*args))
    began = time.perf_counter()
    for _ in range(REPEATS):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - began) / REPEATS


def measure(peak: float, trace_dir: Path | None) -> dict[str, dict[str, float]]:
    import jax
    from flax import nnx

    from marin_pipelines.train.model import Llama, LlamaConfig, preset
    from marin_pipelines.train.optimizer import make_optimizer
    from marin_pipelines.train.train_config import TrainConfig
    from marin_pipelines.train.trainer import _initial_state, _make_train_step

    config = LlamaConfig(**{**preset("150m", VOCAB, SEQ_LEN).model_dump(), "dtype": "bfloat16"})
    train_config = TrainConfig(steps=100, batch_size=BATCH, warmup_steps=2)
    model = Llama(config, nnx.Rngs(0))
    graphdef = nnx.graphdef(model)
    tx = make_optimizer(train_config)
    state = _initial_state(model, tx, train_config)
    batch = jax.device_put(np.random.default_rng(0).integers(0, VOCAB, (BATCH, SEQ_LEN + 1), dtype=np.int32))
    step = _make_train_step(graphdef, tx, train_config, None)
    flops = BATCH * SEQ_LEN * config.flops_per_token()

    def loss(params: Any, batch: Any) -> Any:
        import optax

        logits, _ = nnx.merge(graphdef, params).forward(batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    grad = jax.jit(jax.value_and_grad(loss))
    results: dict[str, dict[str, float]] = {}

    def report(name: str, seconds: float, share: float = 1.0) -> None:
        results[name] = {"ms": seconds * 1e3, "mfu": share * flops / seconds / peak}
        print(f"{name:<40}{seconds * 1e3:>9.1f} ms{results[name]['mfu']:>8.1%}", flush=True)

    jitted = jax.jit(step)
    report("train_step, resident batch", _timed(jitted, state, batch))
    report("forward + backward", _timed(grad, state["params"], batch))
    report("forward (1/3 of the FLOPs)", _timed(jax.jit(loss), state["params"], batch), 1 / 3)
    import marin_pipelines.train.model as model_module

    chosen = model_module.attention_implementation
    try:  # XLA's own attention, which the model used everywhere before it chose cuDNN on GPUs
        model_module.attention_implementation = lambda q: "xla"
        report(
            "forward + backward, XLA attention",
            _timed(jax.jit(jax.value_and_grad(loss)), state["params"], batch),
        )
    finally:
        model_module.attention_implementation = chosen
    donated = jax.jit(step, donate_argnums=0)
    state_copy = jax.tree.map(lambda x: x.copy(), state)

    def run_donated(n: int) -> float:
        nonlocal state_copy
        state_copy, out = donated(state_copy, batch)
        jax.block_until_ready(out)
        began = time.perf_counter()
        for _ in range(n):
            state_copy, out = donated(state_copy, batch)
        jax.block_until_ready(out)
        return (time.perf_counter() - began) / n

    report("train_step, donated state", run_donated(REPEATS))
    if trace_dir is not None:
        with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
            run_donated(3)
    return results


def summarise(trace: Path, top: int = 25) -> None:
    """Sum a perfetto trace's GPU kernel times by name: where the step's milliseconds go."""
    with gzip.open(trace) as file:
        events = json.load(file)
    events = events["traceEvents"] if isinstance(events, dict) else events
    devices = {
        e["pid"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and "GPU" in e["args"]["name"]
    }
    totals: collections.Counter[str] = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e["pid"] in devices:
            totals[e["name"][:90]] += e.get("dur", 0) / 1e3
    total = sum(totals.values())
    print(f"GPU kernel time over the trace: {total:.1f} ms")
    for name, ms in totals.most_common(top):
        print(f"{ms:>9.1f} ms {ms / total:>6.1%}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the card's dense bf16 peak")
    parser.add_argument("--trace-dir", type=Path, help="write a perfetto trace of three steps here")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--summarise", type=Path, help="sum a perfetto trace's kernels and stop")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return
    results = measure(args.peak_tflops * 1e12, args.trace_dir)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
