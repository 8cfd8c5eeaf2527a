"""The standard evaluation suite: what every new checkpoint is evaluated on, whoever made it.

The same for every run, so that the leaderboard's columns meet: the shipped lm-eval tasks (through the chat
template for a chat model), bits-per-byte on the caches the run (or, for a fine-tune, its base) trained on,
and for a chat model the loss on the held-out conversations beside its training chats. Everything is read
from the run folder's own records (``inputs.json``), so a run from the command line is evaluated as a step's.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import yaml
from upath import UPath

from marin_pipelines.evals.checkpoint_eval import EvalConfig
from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS, SHIPPED_TASKS_DIR, TaskLoader
from marin_pipelines.tokenize.demo_chat import HELDOUT_FILE
from marin_pipelines.tokenize.tokenized_cache import INFO_FILE

# every shipped task: a generative one whose answers do not fit a run's context is left out for that run
# and said (``too_long``), never dropped from the suite in silence
STANDARD_TASKS = SHIPPED_TASKS
MAIN_SET = "main"  # the set of a run's own ``data`` (as an experiment's evaluation names it)


def _inputs(run: str) -> dict[str, Any]:
    path = UPath(run, "inputs.json")
    return json.loads(path.read_text()) if path.is_file() else {}


def is_chat(run: str) -> bool:
    """A fine-tuned chat model: ``sft`` wrote its launch config and chat template beside it."""
    return UPath(run, "sft_launch.json").is_file()


def _caches(inputs: dict[str, Any]) -> dict[str, list[str]]:
    """The token caches a run trained on, by mixture source: ``data`` is the main one, ``mixture.NAME``
    the others."""
    sets = {}
    for name, entry in inputs.items():
        source = entry.get("from") if isinstance(entry, dict) else None
        label = MAIN_SET if name == "data" else name.removeprefix("mixture.")
        cache = isinstance(source, str) and (name == "data" or name.startswith("mixture."))
        if cache and UPath(source, INFO_FILE).is_file():
            sets[label] = [source.rstrip("/")]
    return sets


def too_long(task: str, context: int) -> str | None:
    """Why a shipped generative task cannot run on a model of ``context`` positions (its answers are as long
    as the context), or None."""
    path = SHIPPED_TASKS_DIR / f"{task}.yaml"
    if not path.is_file():
        return None
    config = yaml.load(path.read_text(), Loader=TaskLoader)  # noqa: S506 - SafeLoader plus one tag
    longest = (config.get("generation_kwargs") or {}).get("max_gen_toks")
    if longest is not None and longest >= context:
        return f"answers of up to {longest} tokens do not fit a context of {context}"
    return None


def standard_suite(
    run: str, tasks: tuple[str, ...] = STANDARD_TASKS
) -> tuple[dict[str, list[str]], EvalConfig, dict[str, str]]:
    """The bits-per-byte sets and the evaluation config of the standard suite for the run folder ``run``,
    and the tasks left out, with why (a model whose context is too short for the task's answers)."""
    context = json.loads(UPath(run, "model.json").read_text())["seq_len"]
    left_out = {task: why for task in tasks if (why := too_long(task, context))}
    tasks = tuple(task for task in tasks if task not in left_out)
    inputs = _inputs(run)
    chat = is_chat(run)
    base = (inputs.get("base") or {}).get("from")
    bpb = _caches(_inputs(base) if chat and base else inputs)
    chats = {}
    if chat:
        data = (inputs.get("data") or {}).get("from") or []
        for trained in data if isinstance(data, list) else [data]:
            heldout = posixpath.join(posixpath.dirname(trained), HELDOUT_FILE)
            if UPath(heldout).is_file():
                chats.setdefault("chat", []).append(heldout)
    config = EvalConfig(tasks=list(tasks), chat_tasks=chat and bool(tasks), chat=chats)
    return bpb, config, left_out
