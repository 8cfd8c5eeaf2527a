"""A served evaluation: the checkpoint behind ``marin-pipelines serve`` as a child on a free local port, and
lm-eval's own API models asking it, as the field evaluates a served model (Marin: vLLM or Levanter's server).

Plain tasks go through lm-eval's ``local-completions``: it tokenizes with the server's ``/tokenize`` (the
run's tokenizer, through lm-eval's remote tokenizer) to find where a continuation starts, and sends text,
which the server reads after the run's BOS as training read text, so log-likelihoods and greedy generations
are those of an in-process evaluation. A chat model's tasks go through ``local-chat-completions``: the
server renders the conversation with the run's template. That API scores no log-likelihood, so a served chat
evaluation takes generative tasks only.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from marin_pipelines.orphans import launched_env

READY = re.compile(r"marin-pipelines serve: .* as model '(?P<name>.*)' on (?P<url>http://\S+)")
STARTUP_SECONDS = 600  # loading the run and compiling its first steps, on a slow machine
STOP_SECONDS = 120  # SIGTERM lets the requests in flight finish


@contextmanager
def serving(
    run_dir: str, log: Path, tokenizer: str | None = None, slots: int = 8
) -> Iterator[tuple[str, str]]:
    """``marin-pipelines serve RUN`` as a child on a free port of 127.0.0.1, its stderr into ``log``; yields
    its base URL (``http://127.0.0.1:PORT/v1``) and model name once it answers ``/health``, and stops it
    with SIGTERM after (it dies with this process in any case)."""
    command = [
        sys.executable,
        "-m",
        "marin_pipelines.cli",
        "serve",
        run_dir,
        "--port",
        "0",
        "--slots",
        str(slots),
    ]
    if tokenizer:
        command += ["--tokenizer", tokenizer]
    with open(log, "w") as stderr:
        child = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, **launched_env()}
        )
    try:
        url, name = _wait_ready(child, log)
        yield url, name
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _wait_ready(child: subprocess.Popen, log: Path) -> tuple[str, str]:
    """The URL and name the child prints when it listens, once its ``/health`` answers."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(
                f"the served model exited ({child.returncode}) before it listened: {_tail(log)}"
            )
        if found := READY.search(log.read_text()):
            url, name = found["url"], found["name"]
            try:
                with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=5):
                    return url, name
            except OSError:
                pass
        time.sleep(0.2)
    raise RuntimeError(f"the served model did not answer within {STARTUP_SECONDS} s: {_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text()[-2000:] if log.exists() else "(no output)"


def served_lm(url: str, name: str, chat: bool, max_length: int, concurrent: int = 4) -> Any:
    """lm-eval's own API model for the server at ``url``: ``local-chat-completions`` for a chat model's
    tasks, else ``local-completions`` with the server's tokenizer. ``max_length`` is the run's context; the
    server puts BOS before a text and generates at least one token after it, so lm-eval is told two less."""
    from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI

    common = {"model": name, "max_length": max_length - 2, "num_concurrent": concurrent, "max_retries": 1}
    if chat:
        return LocalChatCompletion(base_url=f"{url}/chat/completions", tokenizer_backend=None, **common)
    return LocalCompletionsAPI(
        base_url=f"{url}/completions", tokenizer_backend="remote", tokenized_requests=False, **common
    )
