"""`marin-pipelines serve` under load: 1, 4 and 16 concurrent clients on 127.0.0.1, each a bounded loop of
streamed completions (a client sends its next request once its answer is complete). Per level: generated
tokens/s (all clients together), p50 / p99 latency (request to its last chunk) and time to first token,
with ratios against one client measured in the same run, and the engine alone (stepped in the bench's own
process, no HTTP) as the ceiling. Issue 49's goal: 16 clients get at least 4x the tokens/s of one.

The run is made here in seconds, the demo's size (``micro``, 128 positions, a 2048-token BPE trained on a
few standard-library modules), from two training steps on random tokens: throughput does not depend on what
the weights say. The server is a child process (as a user starts it), so the clients' threads do not share
its interpreter. Before the levels, requests that are not measured compile every prefill shape (``warm``):
a compile inside a level (about 0.8 s here) would stand for most of its p99 and a fifth of its time.
Run: ``.venv/bin/python bench/serve_load.py [--size micro] [--seq-len 128] [--slots 16]``.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from marin_pipelines.inference.engine import Engine
from marin_pipelines.inference.sampling import SamplingParams
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, TokenizerConfig, train_tokenizer
from marin_pipelines.train.model import preset
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trained_run import load_run
from marin_pipelines.train.trainer import train

LEVELS = (1, 4, 16)
REQUESTS = {1: 32, 4: 16, 16: 8}  # each client's requests at each level: 32, 64 and 128 in all
STDLIB_TEXT = ("argparse", "json/decoder", "heapq", "textwrap", "string", "bisect")


@dataclass
class Answer:
    tokens: int
    latency: float
    first_token: float


def make_run(out: Path, size: str, seq_len: int, vocab: int) -> Path:
    """A run folder of ``size`` from two steps on random tokens, with a BPE of ``vocab`` tokens beside."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / f"{name}.py").read_text() for name in STDLIB_TEXT]
    tokenizer = train_tokenizer(texts, TokenizerConfig(vocab_size=vocab))
    model = preset(size, tokenizer.get_vocab_size(), seq_len)
    rng = np.random.default_rng(0)

    def batches(step: int) -> np.ndarray:
        return rng.integers(0, model.vocab_size, (4, seq_len + 1), dtype=np.int32)

    settings = TrainConfig(
        steps=2, batch_size=4, warmup_steps=1, checkpoint_every=2, log_every=1, peak_flops=1e10
    )
    train(model, settings, batches, out, progress=False)
    tokenizer.save(str(out / TOKENIZER_FILE))
    return out


def prompts() -> list[str]:
    """Lines of the standard library's text, a few words each: each request a different prompt."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    lines = [line.strip() for line in (stdlib / "textwrap.py").read_text().splitlines()]
    return [line for line in lines if 20 <= len(line) <= 80]


def ask(client: httpx.Client, url: str, prompt: str, max_tokens: int) -> Answer:
    body = {
        "model": "bench",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started, first, tokens = time.perf_counter(), None, 0
    with client.stream("POST", f"{url}/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk["choices"] and chunk["choices"][0]["text"]:
                first = time.perf_counter() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    latency = time.perf_counter() - started
    return Answer(tokens, latency, latency if first is None else first)


def warm(url: str, slots: int, seq_len: int) -> None:
    """Compile every prefill shape the measured rounds can meet, so that no round times a compile: the
    engine prefills the requests it admits together, padded to a power of two of rows and of positions, so
    one request of 1, 2, 4, ... prompts of 16, 32, ... tokens each is one shape each."""
    with httpx.Client(timeout=600) as http:
        rows = 1
        while rows <= slots:
            width = 16
            while width < seq_len:
                prompt = [[0] + [100 + i for i in range(width - 1)]] * rows
                body = {"model": "bench", "prompt": prompt, "max_tokens": 2, "temperature": 0}  # + a decode
                http.post(f"{url}/completions", json=body).raise_for_status()
                width *= 2
            rows *= 2


def engine_alone(run: Path, slots: int, texts: list[str], max_tokens: int) -> dict[int, float]:
    """The peer the server cannot beat: the same engine stepped in this process with no HTTP, 1 row and
    ``slots`` rows of the same prompts; its tokens/s (after a round that compiles)."""
    loaded = load_run(run)
    engine = Engine.for_run(loaded, slots=slots)
    settings = SamplingParams(max_new_tokens=max_tokens)
    rates = {}
    for rows in (1, slots):
        prompts = [loaded.encode(text) for text in texts[:rows]]
        engine.generate(prompts, settings)
        started = time.perf_counter()
        done = engine.generate(prompts, settings)
        rates[rows] = sum(len(c.tokens) for c in done) / (time.perf_counter() - started)
    return rates


def level(
    url: str, clients: int, rounds: int, texts: list[str], max_tokens: int
) -> tuple[list[Answer], float]:
    """``clients`` threads, each ``rounds`` requests one after another; their answers and the wall time."""
    answers: list[Answer] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        with httpx.Client(timeout=600) as http:
            for r in range(rounds):
                answer = ask(http, url, texts[(index * rounds + r) % len(texts)], max_tokens)
                with lock:
                    answers.append(answer)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="micro", help="a model size (default: the demo's, micro)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--slots", type=int, default=16, help="the server's --slots")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    texts = prompts()
    with tempfile.TemporaryDirectory() as folder:
        run = make_run(Path(folder) / "bench", args.size, args.seq_len, 2048)
        alone = engine_alone(run, args.slots, texts, args.max_tokens)
        command = [sys.executable, "-m", "marin_pipelines.cli", "serve", str(run), "--port", "0"]
        server = subprocess.Popen([*command, "--slots", str(args.slots)], stderr=subprocess.PIPE, text=True)
        printed: list[str] = []
        threading.Thread(target=lambda: printed.extend(server.stderr), daemon=True).start()
        try:
            while not (found := re.search(r"on (http://[\d.]+:\d+/v1)", "".join(printed))):
                if server.poll() is not None:
                    raise SystemExit("".join(printed))
                time.sleep(0.1)
            url = found.group(1)
            print("".join(printed).strip())  # its start message: no request has come yet
            results: dict[int, tuple[list[Answer], float]] = {}
            warm(url, args.slots, args.seq_len)
            for clients in LEVELS:
                results[clients] = level(url, clients, REQUESTS[clients], texts, args.max_tokens)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(120)
    print(
        f"\n{'clients':>7} {'requests':>8} {'tokens/s':>9} {'x 1':>6} {'p50 s':>7} {'x 1':>6} {'p99 s':>7} "
        f"{'p50 TTFT':>9} {'x 1':>6} {'p99 TTFT':>9}"
    )
    base: dict[str, float] = {}
    for clients, (answers, seconds) in results.items():
        latencies, firsts = [a.latency for a in answers], [a.first_token for a in answers]
        figures = {
            "rate": sum(a.tokens for a in answers) / seconds,
            "p50": percentile(latencies, 50),
            "ttft": percentile(firsts, 50),
        }
        base = base or figures
        x = {key: value / base[key] for key, value in figures.items()}
        print(
            f"{clients:>7} {len(answers):>8} {figures['rate']:>9.1f} {x['rate']:>5.2f}x "
            f"{figures['p50']:>7.3f} {x['p50']:>5.2f}x {percentile(latencies, 99):>7.3f} "
            f"{figures['ttft']:>9.4f} {x['ttft']:>5.2f}x {percentile(firsts, 99):>9.4f}"
        )
    top = max(LEVELS)
    answers, seconds = results[top]
    rate = sum(a.tokens for a in answers) / seconds
    mean = statistics.mean(a.tokens for a in answers)
    print(f"\n{top} clients: {rate / base['rate']:.2f}x the tokens/s of one (goal: at least 4x)", end="")
    print(f"; {mean:.1f} tokens an answer")
    many = alone[args.slots]
    print(
        f"the engine alone (no HTTP): 1 row {alone[1]:.0f} tokens/s, {args.slots} rows {many:.0f} "
        f"({many / alone[1]:.2f}x); served, 1 client gets {base['rate'] / alone[1]:.0%} of one row's, "
        f"{top} clients {rate / many:.0%} of {args.slots} rows'"
    )


if __name__ == "__main__":
    main()
