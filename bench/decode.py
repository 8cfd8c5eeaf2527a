"""Decode speed of the generation engine: tokens/s at batch 1 and 16 for the 20m and 150m presets (vocab 32k,
context 1024, random weights), as ratios to peers measured in the same run:

- Hugging Face transformers' ``generate`` (greedy, its KV cache) on the same weights on the same machine:
  transformers makes a random ``LlamaForCausalLM`` of the preset's shape, ``import-hf`` brings it in as a
  run, ``export-hf`` writes the run out again, and transformers loads that export (``hf_peer.py``: its own
  venv, a subprocess; the versions are printed);
- the memory-bandwidth bound: a decode step must read every parameter (the LM head, not the embedding
  table, of which it takes one row a token) and each row's keys and values so far, in the compute dtype;
  the bound is that many bytes over the copy bandwidth measured between the rounds (STREAM's count: bytes
  read + bytes written per second, of a 512 MiB copy on the device; the best of the rounds);
- for information, the FLOP bound: 2 FLOPs a parameter a token at the matmul peak measured beside it
  (``measure_matmul_peak``). Batch 16 on a CPU is bound by it, not by the bandwidth.

Decode tokens/s = batch x (N - 1) / the seconds from the first new token to the N-th, within one generation
(ours: the completions' times; transformers': a streamer noting when each step's tokens come); prefill
tokens/s = the prompt tokens over the seconds to the first new token. The two generators take turns,
``--repeats`` rounds, and each keeps its best: the CPU is shared with other work, which comes and goes by
the minute, and a figure from another moment would not compare.

On a GPU: ``--dtype bfloat16 --no-peer --prompt-len 512`` (the peer is a CPU measurement and needs torch;
without it the model is this project's own random init, no run folder).

Run: ``.venv/bin/python bench/decode.py [--sizes 20m 150m] [--batches 1 16] [--dtype bfloat16] [--no-peer]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hf_peer import PeerDecoder, imported_random_llama, peer

VOCAB, SEQ_LEN = 32_000, 1024
COPY_BYTES = 512 * 2**20


@dataclass(frozen=True)
class Settings:
    prompt_len: int
    new_tokens: int
    repeats: int
    dtype: str

    def prompts(self, batch: int) -> list[list[int]]:
        """``batch`` prompts of random ids, the same for both generators."""
        rng = np.random.default_rng(batch)
        return rng.integers(0, VOCAB, (batch, self.prompt_len)).tolist()

    def rates(self, measured: dict[str, float], batch: int) -> tuple[float, float]:
        """Decode and prefill tokens/s."""
        decode = batch * (self.new_tokens - 1) / measured["decode_seconds"]
        return decode, batch * self.prompt_len / measured["first_token_seconds"]


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


def read_params(config: Any, batch: int) -> int:
    """Parameters a decode step of ``batch`` rows reads: all but the embedding table, of which one row a
    token (a tied table is read whole, as the LM head)."""
    table = 0 if config.tie_embeddings else config.vocab_size * config.d_model
    return config.num_params(active=True) - table + batch * config.d_model


def step_bytes(config: Any, batch: int, context: float, itemsize: int) -> float:
    """Bytes one decode step of ``batch`` rows must read, each row attending ``context`` positions."""
    kv = batch * context * config.n_layers * 2 * config.n_kv_heads * config.head_dim
    return (read_params(config, batch) + kv) * itemsize


def our_model(run_dir: Path | None, config: Any, dtype: str) -> tuple[Any, Any]:
    """The run's model (or, without one, a random init of ``config``) computing in ``dtype``, and a
    tokenizer (the run's, or a small one: the engine decodes text as it goes)."""
    from flax import nnx

    from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer
    from marin_pipelines.train.checkpoint import abstract_model
    from marin_pipelines.train.model import Llama
    from marin_pipelines.train.trained_run import load_run

    config = config.model_copy(update={"dtype": dtype})
    if run_dir is None:
        tokenizer = train_tokenizer(["a decode benchmark"] * 8, TokenizerConfig(vocab_size=300))
        return Llama(config, nnx.Rngs(0)), tokenizer
    run = load_run(run_dir)
    return nnx.merge(abstract_model(config)[0], nnx.state(run.model)), run.tokenizer


def measure_size(size: str, batches: list[int], settings: Settings, with_peer: bool) -> list[dict]:
    """Each batch's row: our engine and (``with_peer``) transformers in alternating rounds, best of each,
    with the copy bandwidth (the best of the rounds: the highest bound) and matmul peak measured between."""
    from contextlib import nullcontext

    from marin_pipelines.inference.engine import Engine
    from marin_pipelines.inference.sampling import SamplingParams
    from marin_pipelines.train.export import export_hf, hf_config
    from marin_pipelines.train.model import preset
    from marin_pipelines.train.throughput import measure_matmul_peak

    config = preset(size, VOCAB, SEQ_LEN)
    itemsize = 2 if settings.dtype == "bfloat16" else 4
    context = settings.prompt_len + settings.new_tokens / 2  # the mean positions a decode step attends
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        run_dir = None
        if with_peer:
            run_dir = imported_random_llama(hf_config(config), work)[1]
            export_hf(run_dir, work / "export")
        model, tokenizer = our_model(run_dir, config, settings.dtype)
        with PeerDecoder(work / "export", settings.dtype) if with_peer else nullcontext() as hf:
            for batch in batches:
                engine = Engine(model, tokenizer, slots=batch, max_len=SEQ_LEN)  # no stop token: all made
                prompts = settings.prompts(batch)

                def ours(engine: Engine = engine, prompts: list = prompts) -> dict[str, float]:
                    done = engine.generate(prompts, SamplingParams(max_new_tokens=settings.new_tokens))
                    assert all(len(c.tokens) == settings.new_tokens for c in done)
                    first = max(c.first_token_seconds or 0.0 for c in done)  # one prefill for all
                    return {
                        "first_token_seconds": first,
                        "decode_seconds": max(c.seconds for c in done) - first,
                    }

                ours()  # compiles every shape the measurement takes
                if hf is not None:
                    hf.round(prompts, settings.new_tokens)  # warms up, picks its thread count
                rounds: dict[str, list[float]] = {}
                for _ in range(settings.repeats):
                    measured = {
                        "bandwidth": copy_bandwidth(),
                        "peak": measure_matmul_peak.__wrapped__(1024, 5, settings.dtype)[0],
                        **ours(),
                    }
                    if hf is not None:
                        theirs = hf.round(prompts, settings.new_tokens)
                        measured |= {f"hf_{k}": v for k, v in theirs.items()}
                    for key, value in measured.items():
                        rounds.setdefault(key, []).append(value)
                del engine
                rows.append(row_of(size, batch, config, settings, rounds, context, itemsize))
                print(
                    json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()})
                )
    return rows


def row_of(
    size: str, batch: int, config: Any, settings: Settings, rounds: dict, context: float, itemsize: int
) -> dict[str, Any]:
    """The best of the rounds: the shortest times, the highest bandwidth and peak (the highest bounds)."""
    best = {key: (max if key in ("bandwidth", "peak") else min)(values) for key, values in rounds.items()}
    decode, prefill = settings.rates(best, batch)
    row = {
        "size": size,
        "batch": batch,
        "decode": decode,
        "prefill": prefill,
        "copy_GB/s": best["bandwidth"] / 1e9,
        "bound": batch * best["bandwidth"] / step_bytes(config, batch, context, itemsize),
        "peak_GFLOP/s": best["peak"] / 1e9,
        "flop_bound": best["peak"] / (2 * read_params(config, batch=0)),  # the lookup does no FLOPs
    }
    if "hf_decode_seconds" in best:
        theirs = {k: best[f"hf_{k}"] for k in ("first_token_seconds", "decode_seconds")}
        row["hf_decode"], row["hf_prefill"] = settings.rates(theirs, batch)
        row["hf_threads"] = rounds["hf_threads"][-1]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["20m", "150m"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true", help="skip Hugging Face (on a GPU)")
    args = parser.parse_args()
    settings = Settings(args.prompt_len, args.new_tokens, args.repeats, args.dtype)

    import flax
    import jax

    device = jax.devices()[0]
    print(
        f"device: {device.platform} {device.device_kind} x{jax.device_count()}; jax {jax.__version__}, "
        f"flax {flax.__version__}; matmuls in {args.dtype}; prompts of {args.prompt_len}, "
        f"{args.new_tokens} new tokens"
    )
    if not args.no_peer:
        print("peer:", json.dumps(peer("versions")))
    rows = [
        row for size in args.sizes for row in measure_size(size, args.batches, settings, not args.no_peer)
    ]
    print_table(rows)


def print_table(rows: list[dict[str, Any]]) -> None:
    peer_columns = "hf_decode" in rows[0]
    head = f"{'model':<6}{'batch':>6}{'decode tok/s':>14}{'bound tok/s':>13}{'of bound':>10}"
    if peer_columns:
        head += f"{'HF tok/s':>10}{'vs HF':>8}{'HF of bound':>13}"
    head += f"{'FLOP bound':>12}{'prefill tok/s':>15}" + (f"{'HF prefill':>12}" if peer_columns else "")
    print(head)
    for r in rows:
        line = f"{r['size']:<6}{r['batch']:>6}{r['decode']:>14.1f}{r['bound']:>13.1f}"
        line += f"{r['decode'] / r['bound']:>10.0%}"
        if peer_columns:
            line += f"{r['hf_decode']:>10.1f}{r['decode'] / r['hf_decode']:>7.2f}x"
            line += f"{r['hf_decode'] / r['bound']:>13.0%}"
        line += f"{r['flop_bound']:>12.0f}{r['prefill']:>15.0f}"
        print(line + (f"{r['hf_prefill']:>12.0f}" if peer_columns else ""))


if __name__ == "__main__":
    main()
