"""`marin-pipelines serve` as a process, as a user (or a served evaluation) starts it: on a run folder made
here (two training steps of a tiny model, its tokenizer beside), a free port, an API key from the environment.
SIGTERM while a stream is in flight: new requests get 503, the stream runs to its last token, the process
exits 0, and the key is nowhere in what it printed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, TokenizerConfig, train_tokenizer
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trainer import train

CONTEXT = 2048  # room for a stream that runs for seconds, while the test asks again in milliseconds
KEY_ENV = "MARIN_TEST_SERVE_KEY"
KEY = "sk-serve-test-4f9c2e71d0"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serve") / "tiny-run"
    tokenizer = train_tokenizer(
        ["the quick brown fox jumps over the lazy dog. " * 20], TokenizerConfig(vocab_size=300)
    )
    model = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        seq_len=CONTEXT,
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=64,
    )
    settings = TrainConfig(
        steps=2, batch_size=2, warmup_steps=1, checkpoint_every=2, log_every=1, peak_flops=1e10
    )

    def batches(step: int) -> np.ndarray:
        return np.random.default_rng(step).integers(0, model.vocab_size, (2, CONTEXT + 1), dtype=np.int32)

    train(model, settings, batches, out, progress=False)
    tokenizer.save(str(out / TOKENIZER_FILE))
    return out


def test_sigterm_finishes_the_stream_in_flight_refuses_new_requests_and_exits_0(run_dir):
    env = {**os.environ, KEY_ENV: KEY, "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, "-m", "marin_pipelines.cli", "serve", str(run_dir), "--port", "0"]
    server = subprocess.Popen(
        [*command, "--api-key-env", KEY_ENV, "--slots", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(server.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while not (found := re.search(r"on (http://127\.0\.0\.1:\d+/v1)", "".join(errors))):
            assert server.poll() is None and time.monotonic() < deadline, "".join(errors)[-3000:]
            time.sleep(0.05)
        url = found.group(1)
        auth = {"Authorization": f"Bearer {KEY}"}
        start = "".join(errors)
        assert "as model 'tiny-run'" in start and f"slots 2, queue 256, context {CONTEXT} tokens" in start
        assert f"API key: from ${KEY_ENV}" in start
        assert httpx.get(f"{url}/models", timeout=60).status_code == 401

        body = {"model": "tiny-run", "prompt": "the quick", "max_tokens": CONTEXT - 24, "temperature": 0}
        streamed: list[str] = []
        first = threading.Event()

        def stream() -> None:
            options = {"stream": True, "stream_options": {"include_usage": True}}
            with httpx.stream(
                "POST", f"{url}/completions", json={**body, **options}, headers=auth, timeout=300
            ) as r:
                for line in r.iter_lines():
                    if line:
                        streamed.append(line.removeprefix("data: "))
                        first.set()

        client = threading.Thread(target=stream)
        client.start()
        assert first.wait(120), "no first chunk"
        server.send_signal(signal.SIGTERM)
        with httpx.Client(headers=auth, timeout=60) as again:
            while (health := again.get(url.removesuffix("/v1") + "/health")).status_code == 200:
                assert time.monotonic() < deadline
            refused = again.post(f"{url}/completions", json={**body, "max_tokens": 1})
            in_flight = streamed[-1] != "[DONE]"
        assert in_flight, "the stream ended before the server was asked again: nothing was tested"
        assert health.status_code == 503 and refused.status_code == 503
        assert refused.json()["error"]["message"] == "the server is shutting down"

        client.join(300)
        assert streamed[-1] == "[DONE]"
        chunks = [json.loads(line) for line in streamed[:-1]]
        assert chunks[-1]["usage"]["completion_tokens"] + chunks[-1]["usage"]["prompt_tokens"] > 0
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        assert finish[-1] in ("length", "stop") and "cancelled" not in finish
        assert server.wait(120) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    reader.join(10)
    printed = "".join(errors) + server.stdout.read()
    assert "POST /v1/completions 503" in printed and "SIGTERM: refusing new requests" in printed
    assert KEY not in printed
