"""Decode speed of the generation engine: tokens/s at batch 1 and 16 for the 20m and 150m presets (vocab 32k,
context 1024, random weights), as ratios to two peers measured in the same run:

- Hugging Face transformers' ``generate`` (greedy, its KV cache) on the same weights on the same machine:
  transformers makes a random ``LlamaForCausalLM`` of the preset's shape, ``import-hf`` brings it in as a
  run, ``export-hf`` writes the run out again, and transformers loads that export (``hf_peer.py``: its own
  venv, a subprocess; the versions are printed);
- the memory-bandwidth bound: a decode step must read every parameter (the LM head, not the embedding
  table, of which it takes one row a token) and each row's keys and values so far, in the compute dtype;
  the bound is that many bytes over the copy bandwidth measured here right before each row (STREAM's count:
  bytes read + bytes written per second, of a 512 MiB copy on the device; the machine is shared, so a
  figure from another moment would not compare).

Decode tokens/s = batch x (N - 1) / (seconds for N new tokens - seconds for 1): the prompt's prefill and
first token cancel out (that difference is the same for both generators); prefill tokens/s = the prompt
tokens over the seconds for 1. Best of ``--repeats`` each (the CPU is shared). ``--dtype bfloat16`` runs the
matmuls in bf16 (the GPU's figures; ``--no-peer`` there, the peer being a CPU measurement).

Run: ``.venv/bin/python bench/decode.py [--sizes 20m 150m] [--batches 1 16] [--dtype bfloat16] [--no-peer]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from hf_peer import imported_random_llama, peer

VOCAB, SEQ_LEN = 32_000, 1024
PROMPT_LEN, NEW_TOKENS = 32, 64
COPY_BYTES = 512 * 2**20


def copy_bandwidth(repeats: int = 20) -> float:
    """Bytes read + written per second by a copy of COPY_BYTES into a buffer donated to it (no allocation
    in the timed loop), on the default device, best of ``repeats``."""
    import jax
    import jax.numpy as jnp

    source = jnp.ones(COPY_BYTES // 4, jnp.float32)
    target = jnp.zeros_like(source)
    copy = jax.jit(lambda s, t: t.at[:].set(s * 1.0001), donate_argnums=1)  # the scale: no aliasing
    target = jax.block_until_ready(copy(source, target))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        target = jax.block_until_ready(copy(source, target))
        best = min(best, time.perf_counter() - start)
    return 2 * COPY_BYTES / best


def step_bytes(config: Any, batch: int, context: float, itemsize: int) -> float:
    """Bytes one decode step of ``batch`` rows must read, each row attending ``context`` positions."""
    table = 0 if config.tie_embeddings else config.vocab_size * config.d_model  # read one row a token
    params = config.num_params(active=True) - table + batch * config.d_model
    kv = batch * context * config.n_layers * 2 * config.n_kv_heads * config.head_dim
    return (params + kv) * itemsize


def engine_seconds(run_dir: Path, batches: list[int], dtype: str, repeats: int) -> dict[int, dict]:
    """This project's engine: seconds for 1 and for NEW_TOKENS new tokens, per batch size."""
    from flax import nnx

    from marin_pipelines.inference.engine import Engine
    from marin_pipelines.inference.sampling import SamplingParams
    from marin_pipelines.train.checkpoint import abstract_model
    from marin_pipelines.train.trained_run import load_run

    run = load_run(run_dir)
    config = run.model.config.model_copy(update={"dtype": dtype})
    model = nnx.merge(abstract_model(config)[0], nnx.state(run.model))
    out = {}
    for batch in batches:
        engine = Engine(model, run.tokenizer, slots=batch, max_len=SEQ_LEN)  # no stop token: all N made
        prompts = prompts_of(batch)

        def seconds(count: int, engine: Engine = engine, prompts: list = prompts) -> float:
            start = time.perf_counter()
            done = engine.generate(prompts, SamplingParams(max_new_tokens=count))
            assert all(len(c.tokens) == count for c in done)
            return time.perf_counter() - start

        seconds(NEW_TOKENS)  # compiles every shape the measurement takes
        bandwidth = copy_bandwidth()
        first, whole = [], []
        for _ in range(repeats):
            first.append(seconds(1))
            whole.append(seconds(NEW_TOKENS))
        out[batch] = {"first_token_seconds": min(first), "seconds": min(whole), "bandwidth": bandwidth}
        del engine
    return out


def prompts_of(batch: int) -> list[list[int]]:
    """``batch`` prompts of PROMPT_LEN random ids, the same for both generators."""
    rng = np.random.default_rng(batch)
    return rng.integers(0, VOCAB, (batch, PROMPT_LEN)).tolist()


def rates(measured: dict[str, float], batch: int) -> tuple[float, float]:
    """Decode and prefill tokens/s."""
    decode = batch * (NEW_TOKENS - 1) / (measured["seconds"] - measured["first_token_seconds"])
    return decode, batch * PROMPT_LEN / measured["first_token_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["20m", "150m"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true", help="skip Hugging Face (on a GPU)")
    args = parser.parse_args()

    import flax
    import jax

    from marin_pipelines.train.export import export_hf, hf_config
    from marin_pipelines.train.model import preset

    device = jax.devices()[0]
    print(
        f"device: {device.platform} {device.device_kind} x{jax.device_count()}; jax {jax.__version__}, "
        f"flax {flax.__version__}; matmuls in {args.dtype}"
    )
    if not args.no_peer:
        print("peer:", json.dumps(peer("versions")))
    itemsize = 2 if args.dtype == "bfloat16" else 4
    context = PROMPT_LEN + NEW_TOKENS / 2  # the mean positions a measured decode step attends
    rows = []
    for size in args.sizes:
        config = preset(size, VOCAB, SEQ_LEN)
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            _, run_dir = imported_random_llama(hf_config(config), work)
            ours = engine_seconds(run_dir, args.batches, args.dtype, args.repeats)
            if not args.no_peer:
                export_hf(run_dir, work / "export")
            for batch in args.batches:
                decode, prefill = rates(ours[batch], batch)
                bandwidth = ours[batch]["bandwidth"]
                bound = batch * bandwidth / step_bytes(config, batch, context, itemsize)
                row = {
                    "size": size,
                    "batch": batch,
                    "decode": decode,
                    "prefill": prefill,
                    "copy_GB/s": bandwidth / 1e9,
                    "bound": bound,
                }
                if not args.no_peer:
                    request = {
                        "prompts": prompts_of(batch),
                        "new_tokens": NEW_TOKENS,
                        "repeats": args.repeats,
                        "dtype": args.dtype,
                    }
                    theirs = peer("decode", str(work / "export"), json.dumps(request))
                    row["hf_decode"], row["hf_prefill"] = rates(theirs, batch)
                    row["hf_threads"] = theirs["threads"]
                rows.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))
    print_table(rows)


def print_table(rows: list[dict[str, Any]]) -> None:
    peer_columns = "hf_decode" in rows[0]
    head = f"{'model':<6}{'batch':>6}{'decode tok/s':>14}{'bound tok/s':>13}{'of bound':>10}"
    if peer_columns:
        head += f"{'HF tok/s':>10}{'vs HF':>8}{'HF of bound':>13}"
    print(head + f"{'prefill tok/s':>15}" + (f"{'HF prefill':>12}" if peer_columns else ""))
    for r in rows:
        line = f"{r['size']:<6}{r['batch']:>6}{r['decode']:>14.1f}{r['bound']:>13.1f}"
        line += f"{r['decode'] / r['bound']:>10.0%}"
        if peer_columns:
            line += f"{r['hf_decode']:>10.1f}{r['decode'] / r['hf_decode']:>7.2f}x"
            line += f"{r['hf_decode'] / r['bound']:>13.0%}"
        print(line + f"{r['prefill']:>15.0f}" + (f"{r['hf_prefill']:>12.0f}" if peer_columns else ""))


if __name__ == "__main__":
    main()
