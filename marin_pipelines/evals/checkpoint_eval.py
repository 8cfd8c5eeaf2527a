"""A checkpoint's evaluation: bits-per-byte sets and lm-eval tasks, in lm-eval's JSON shape plus ``bpb``.

What the ``eval_results`` assets and ``marin-pipelines eval`` both call, so that a number in the UI and
one from the command line come from the same code. Checkpoints, tokenizers and sets may live on object
storage (``gs://``): orbax restores from there, a token cache is read from its local copy.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from tokenizers import Tokenizer
from upath import UPath

from marin_pipelines.evals.chat_loss import chat_loss
from marin_pipelines.evals.eval_results import bpb_tokens, evaluate_bpb_sets
from marin_pipelines.store import is_local, local_copy
from marin_pipelines.tokenize.chat_data import DEFAULT_TEMPLATE, ChatTemplate
from marin_pipelines.tokenize.tokenized_cache import INFO_FILE
from marin_pipelines.tokenize.tokenizer import (
    RUN_MADE_HERE,
    SpecialTokens,
    token_byte_lengths,
)
from marin_pipelines.train.model import Llama
from marin_pipelines.train.trained_run import load_run


class EvalConfig(BaseModel):
    """What every checkpoint of an experiment is evaluated on, beside its mixture's validation splits."""

    model_config = ConfigDict(extra="forbid")

    heldout: dict[str, list[str]] = Field(
        default_factory=dict,
        description="held-out text sets for bits-per-byte: name -> .txt / .jsonl / .parquet files or folders",
    )
    tasks: list[str] = Field(
        default_factory=list,
        description="lm-eval task names (the shipped suite, include_paths' or lm-eval's)",
    )
    include_paths: list[str] = Field(
        default_factory=list, description="folders of further lm-eval task YAMLs"
    )
    limit: int | None = Field(None, ge=1, description="at most this many documents per task")
    chat: dict[str, list[str]] = Field(
        default_factory=dict,
        description='held-out chat sets for loss per assistant token: name -> JSON-lines {"messages"} files',
    )
    chat_tasks: bool = Field(False, description="lm-eval tasks' prompts through the chat template")
    served: bool = Field(
        False,
        description="ask the tasks of the checkpoint behind `marin-pipelines serve` on a free local port, "
        "through lm-eval's local-completions (local-chat-completions with chat_tasks: generative tasks "
        "only); bits-per-byte and chat loss stay in process",
    )

    @field_validator("heldout", "chat")
    @classmethod
    def _named_sets(cls, heldout: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, paths in heldout.items():
            if not paths:
                raise ValueError(f"held-out set {name!r} names no files")
        return heldout

    @model_validator(mode="after")
    def _tasks_for_chat(self) -> EvalConfig:
        if self.chat_tasks and not self.tasks:
            raise ValueError("chat_tasks runs the tasks through the chat template: name some tasks")
        return self


def heldout_fingerprint(heldout: dict[str, list[str]]) -> dict[str, Any]:
    """A content hash of every file of each held-out set, so that editing a set in place re-evaluates.

    Object stores' own content hashes (GCS crc32c / md5, S3 ETag) are used where ``fs.info`` has one, so
    a ``gs://`` set is not downloaded to be versioned; local files are hashed (sha256). A path that does
    not exist is recorded as missing: the evaluation raises the clear error when it runs.
    """
    out: dict[str, Any] = {}
    for name, paths in heldout.items():
        out[name] = {}
        for path in paths:
            fs, root = fsspec.core.url_to_fs(path)
            if not fs.exists(root):
                out[name][path] = "missing"
                continue
            files = sorted(fs.find(root)) if fs.isdir(root) else [root]
            out[name][path] = {file.removeprefix(root): _content_hash(fs, file) for file in files}
    return out


def _content_hash(fs: fsspec.AbstractFileSystem, path: str) -> str:
    info = fs.info(path)
    for key in ("crc32c", "md5Hash", "ETag"):
        if info.get(key):
            return f"{key}:{info[key]}"
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def local_input(path: str) -> str:
    """A token cache on object storage as its local copy (downloaded once, checked against its manifest);
    anything else as given (text files are streamed where they are)."""
    if is_local(path) or not UPath(path, INFO_FILE).is_file():
        return path
    return str(local_copy(path))


def with_heldout(bpb_sets: dict[str, list[str]], config: EvalConfig) -> dict[str, list[str]]:
    """``bpb_sets`` and ``config.heldout`` as one mapping, refusing a held-out name that is taken."""
    sets = {**bpb_sets, **config.heldout}
    if len(sets) < len(bpb_sets) + len(config.heldout):
        raise ValueError(f"held-out set names {sorted(config.heldout)} clash with {sorted(bpb_sets)}")
    return sets


def evaluate_checkpoint(
    model: Llama,
    tokenizer: Tokenizer,
    bpb_sets: dict[str, list[str]],
    config: EvalConfig,
    batch_size: int,
    progress: Callable[[str], None] | None = None,
    chat_sets: dict[str, list[str]] | None = None,
    chat_template: str | None = None,
    *,
    chat_tasks: bool = False,
    specials: SpecialTokens = RUN_MADE_HERE,
    served_run: str | None = None,
    tokenizer_file: str = "the evaluating tokenizer",
) -> dict[str, Any]:
    """``bpb_sets`` (name -> token cache folders, whose validation split is read, or text files) and
    ``config.heldout`` in bits per byte; ``config.tasks`` through lm-eval; ``chat_sets`` (name -> chat
    JSON-lines files) as loss per assistant token through ``chat_template`` (the default one when None).
    With ``chat_tasks`` the tasks' prompts also go through that template, for a fine-tuned chat model.
    ``specials`` are the run's special tokens (``run_special_tokens``): what texts start and end with;
    ``tokenizer_file`` is where ``tokenizer`` was read (named where a token cache of another is refused).
    With ``config.served`` the tasks are asked of ``served_run`` (the run folder) behind a served child
    (``served.py``).
    Returns lm-eval's results (``results``, ``configs``, ...; none without tasks) with a ``bpb`` section (per
    set and overall) and a ``chat`` section. ``progress`` gets a line as each part finishes: an evaluation on
    an accelerator can take hours."""
    from marin_pipelines.evals.lm_eval_adapter import JaxLM
    from marin_pipelines.evals.lm_eval_tasks import run_tasks

    say = progress or (lambda _: None)
    sets = with_heldout(bpb_sets, config)
    seq_len = model.config.seq_len
    tokens = {
        name: np.concatenate([bpb_tokens(local_input(p), tokenizer, specials, tokenizer_file) for p in paths])
        for name, paths in sets.items()
    }
    template = ChatTemplate(tokenizer, chat_template or DEFAULT_TEMPLATE, specials)
    results: dict[str, Any] = {}
    if config.tasks:
        started = time.perf_counter()
        includes = [Path(p) for p in config.include_paths]
        with tempfile.TemporaryDirectory() as work_dir:
            if config.served:
                results = served_tasks(served_run, config, includes, Path(work_dir), model.config.seq_len)
                results["chat_template"] = template.source if chat_tasks else None
            else:
                lm = JaxLM(
                    model, tokenizer, batch_size, chat=template if chat_tasks else None, specials=specials
                )
                results = run_tasks(lm, config.tasks, includes, Path(work_dir), config.limit, chat_tasks)
        say(f"lm-eval: {len(config.tasks)} tasks in {time.perf_counter() - started:.1f} s")
    if tokens:
        token_bytes = token_byte_lengths(tokenizer)
        results["bpb"] = evaluate_bpb_sets(model, tokens, token_bytes, seq_len, batch_size, say)
    if chat_sets:
        results["chat"] = {}
        for name, paths in chat_sets.items():
            measured = results["chat"][name] = chat_loss(model, template, paths, batch_size)
            loss = measured["loss"]
            say(
                f"chat {name}: "
                + (f"{loss:.4f} nats per assistant token" if loss is not None else measured["no_loss"])
            )
    return results


def served_tasks(
    run_dir: str | None, config: EvalConfig, includes: list[Path], work_dir: Path, context: int
) -> dict[str, Any]:
    """``config.tasks`` asked of ``run_dir`` behind a served child, with lm-eval's API models."""
    from marin_pipelines.evals.lm_eval_tasks import run_tasks
    from marin_pipelines.evals.served import served_lm, serving

    if run_dir is None:
        raise ValueError("evals.served: the evaluation has no run folder to serve")
    api = "local-chat-completions" if config.chat_tasks else "local-completions"
    with serving(run_dir, work_dir / "serve.log") as (url, name):
        lm = served_lm(url, name, config.chat_tasks, context)
        try:
            results = run_tasks(lm, config.tasks, includes, work_dir, config.limit, config.chat_tasks)
        except NotImplementedError:  # lm-eval's chat-completions model scores no log-likelihood
            raise ValueError(
                f"evals.served with chat_tasks asks through lm-eval's {api}, which takes generative tasks "
                f"only: one of {config.tasks} scores log-likelihoods (serve it without chat_tasks)"
            ) from None
    return {**results, "served": {"api": api}}


def scores(results: dict[str, Any]) -> dict[str, float]:
    """Flat ``{name: number}``: ``bpb/SET`` (bits per byte), ``loss/SET``, ``chat/SET`` (nats per assistant
    token) and ``TASK/METRIC``."""
    from marin_pipelines.evals.lm_eval_tasks import task_scores

    flat = {}
    for name, r in results.get("bpb", {}).items():
        flat[f"bpb/{name}"] = float(r["bits_per_byte"])
        flat[f"loss/{name}"] = float(r["loss"])
    for name, r in results.get("chat", {}).items():
        if r["loss"] is not None:  # else nothing was scored (its ``no_loss`` says why)
            flat[f"chat/{name}"] = float(r["loss"])
    for task, metrics in task_scores(results).items():
        flat.update({f"{task}/{metric}": value for metric, value in metrics.items()})
    return flat


def missing_tasks(requested: list[str], flat: dict[str, float]) -> list[str]:
    """Requested tasks without one finite number among ``scores``."""
    return [
        t for t in requested if not any(k.startswith(f"{t}/") and math.isfinite(v) for k, v in flat.items())
    ]


def results_table(current: dict[str, float], previous: dict[str, float] | None = None) -> str:
    """Markdown: each number, and with ``previous`` (another version's scores) the change against it."""
    if previous is None:
        rows = [f"| {name} | {value:.4g} |" for name, value in current.items()]
        return "| metric | value |\n|---|---:|\n" + "\n".join(rows)
    rows = []
    for name, value in current.items():
        before = previous.get(name)
        change = "new" if before is None else f"{value - before:+.4g}"
        rows.append(f"| {name} | {value:.4g} | {'' if before is None else f'{before:.4g}'} | {change} |")
    return "| metric | value | previous | change |\n|---|---:|---:|---:|\n" + "\n".join(rows)


def load_for_eval(
    checkpoint_dir: str | os.PathLike[str], tokenizer_file: str | os.PathLike[str] | None
) -> tuple[Llama, Tokenizer, SpecialTokens]:
    """The model of a training directory, its tokenizer (``tokenizer_file`` or the one beside it) and its
    special tokens (``run_special_tokens``); each a local path or a URL."""
    run = load_run(checkpoint_dir, tokenizer_file)
    return run.model, run.tokenizer, run.specials
