"""Evaluation items: the text that training data is decontaminated against (``text/decontaminated_text``).

- lm-eval tasks by name (the shipped suite, a folder of task YAMLs, lm-eval's own registry when the data is
  local): each test (else validation) document's prompt and its correct answer, as lm-eval builds them; the
  prompt is kept apart too, so that it can be matched on its own (``match_prompt_alone``).
- Files: ``.txt`` (one item a line), ``.jsonl`` (a ``text`` field, or chat ``messages`` whose contents are
  joined; the turns before a closing assistant turn are its prompt), local or any fsspec URL.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import fsspec

from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS_DIR, resolve_task_dir
from marin_pipelines.text.decontaminated_text import EvalItem
from marin_pipelines.tokenize.chat_data import ChatStats, read_conversations


def task_items(
    tasks: Sequence[str], include_paths: Sequence[str | os.PathLike[str]] = ()
) -> Iterator[EvalItem]:
    """Every document of each lm-eval task in ``tasks``: its prompt and its correct answer."""
    if not tasks:
        return
    from lm_eval.tasks import TaskManager, get_task_dict

    with tempfile.TemporaryDirectory() as work:
        folders = [SHIPPED_TASKS_DIR, *map(Path, include_paths)]
        resolved = [str(resolve_task_dir(p, Path(work) / f"tasks-{i}")) for i, p in enumerate(folders)]
        manager = TaskManager(include_path=resolved, include_defaults=False)
        if any(t not in manager.all_tasks for t in tasks):  # lm-eval's own registry: ~10 s to index
            manager = TaskManager(include_path=resolved, include_defaults=True)
        if unknown := [t for t in tasks if t not in manager.all_tasks]:
            raise ValueError(f"unknown lm-eval tasks {unknown}")
        for name, task in _leaves(get_task_dict(list(tasks), manager)):
            for number, doc in enumerate(task.eval_docs):
                yield EvalItem(name, str(number), *_item_text(task, doc))


def _leaves(tasks: dict[Any, Any]) -> Iterator[tuple[str, Any]]:
    """(name, task) of every task in lm-eval's task dict, groups opened."""
    for key, value in tasks.items():
        if isinstance(value, dict):
            yield from _leaves(value)
        else:
            yield getattr(key, "group_name", key) if not isinstance(key, str) else key, value


def _item_text(task: Any, doc: dict[str, Any]) -> tuple[str, str]:
    """The prompt and the correct answer, as the model would see them solved, and the prompt alone."""
    prompt = task.doc_to_text(doc)
    target = task.doc_to_target(doc)
    if task.OUTPUT_TYPE == "multiple_choice":
        choices = task.doc_to_choice(doc)
        target = choices[target] if isinstance(target, int) else target
    if isinstance(target, list):
        target = target[0] if target else ""
    return f"{prompt} {target}".strip(), str(prompt).strip()


def file_items(paths: Sequence[str | os.PathLike[str]]) -> Iterator[EvalItem]:
    """The items of ``.txt`` and ``.jsonl`` files, each file a set named after it."""
    for path in map(str, paths):
        suite = Path(path).name
        if path.endswith(".txt"):
            with fsspec.open(path, "rt", encoding="utf-8") as f:
                lines = [line.strip() for line in f]
            yield from (EvalItem(suite, str(n), line) for n, line in enumerate(lines, 1) if line)
        elif path.endswith(".jsonl"):
            yield from _jsonl_items(path, suite)
        else:
            raise ValueError(f"evaluation file {path}: expected .txt (one item a line) or .jsonl")


def _jsonl_items(path: str, suite: str) -> Iterator[EvalItem]:
    with fsspec.open(path, "rt", encoding="utf-8") as f:
        first = next((line for line in f if line.strip()), "")
    if isinstance(head := _record(first or "{}", path, 1), dict) and "messages" in head:
        conversations = read_conversations([path], ChatStats())
        for n, messages in enumerate(conversations, 1):
            answered = len(messages) > 1 and messages[-1]["role"] == "assistant"
            prompt = "\n".join(m["content"] for m in messages[:-1]) if answered else ""
            yield EvalItem(suite, str(n), "\n".join(m["content"] for m in messages), prompt)
        return
    with fsspec.open(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = _record(line, path, n)
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f"evaluation file {path}:{n}: expected a 'text' field or chat 'messages'")
            yield EvalItem(suite, str(record.get("id", n)), record["text"])


def _record(line: str, path: str, n: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"evaluation file {path}:{n}: not JSON ({e.msg})") from None


def evaluation_items(against: Sequence[str]) -> list[EvalItem]:
    """The items of everything in ``against``: lm-eval task names, task YAML files (their folder is searched
    for the task), folders of task YAMLs (searched for the named tasks), ``.txt`` and ``.jsonl`` files."""
    tasks, folders, files = [], [], []
    for entry in against:
        if entry.endswith((".yaml", ".yml")):
            folders.append(str(Path(entry).parent))
            tasks.append(_task_name(entry))
        elif entry.endswith((".txt", ".jsonl")):
            files.append(entry)
        elif Path(entry).is_dir():  # a folder of task YAMLs, where the named tasks are looked up too
            folders.append(entry)
        else:
            tasks.append(entry)
    return [*task_items(tasks, folders), *file_items(files)]


def _task_name(yaml_file: str) -> str:
    import yaml

    from marin_pipelines.evals.lm_eval_tasks import TaskLoader

    with open(yaml_file) as f:
        config = yaml.load(f, Loader=TaskLoader)  # noqa: S506 - SafeLoader plus lm-eval's !function tag
    if not isinstance(config, dict) or "task" not in config:
        raise ValueError(f"{yaml_file}: not an lm-eval task (no 'task' field)")
    return str(config["task"])
