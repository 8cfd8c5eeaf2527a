"""lm-eval tasks on local data: the suite shipped in ``evals/tasks/``, any user folder, run offline.

lm-eval 0.4.13 passes a task's ``dataset_kwargs.data_files`` to ``datasets.load_dataset`` unchanged,
so a relative path would be read from the current directory. ``resolve_task_dir`` copies a task folder
and rewrites relative ``data_files`` against the YAML's own folder; a task folder then works from
anywhere (and inside an installed package).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # lm-eval is slow to import: not for who only lists the shipped tasks
    from lm_eval.api.model import LM

SHIPPED_TASKS_DIR = Path(__file__).parent / "tasks"
# seconds per checkpoint on a CPU: what the demo runs on every evaluated checkpoint
QUICK_TASKS = ("marin_python_mc", "marin_python_cloze", "marin_python_qa", "marin_python_text")
FUNCTION_TASKS = ("marin_python_signature", "marin_python_doc")  # generative, from ``python_functions``
SHIPPED_TASKS = QUICK_TASKS + FUNCTION_TASKS


class _Function(str):
    """A ``!function`` tag's value, kept as written so that lm-eval resolves it against the same folder."""


class TaskLoader(yaml.SafeLoader):
    """Reads a task YAML, its ``!function`` tags kept as written."""


class _Dumper(yaml.SafeDumper):
    pass


TaskLoader.add_constructor("!function", lambda loader, node: _Function(loader.construct_scalar(node)))
_Dumper.add_representer(_Function, lambda dumper, value: dumper.represent_scalar("!function", str(value)))


def _absolute(files: Any, base: Path) -> Any:
    if isinstance(files, str):
        return files if "://" in files or Path(files).is_absolute() else str((base / files).resolve())
    if isinstance(files, list):
        return [_absolute(f, base) for f in files]
    if isinstance(files, dict):
        return {split: _absolute(f, base) for split, f in files.items()}
    raise ValueError(f"data_files must be a path, a list or a mapping of splits, got {files!r}")


def resolve_task_dir(source: Path, target: Path) -> Path:
    """Copy the task folder ``source`` to ``target`` with every relative ``data_files`` made absolute."""
    source = Path(source)
    if not source.is_dir():
        raise FileNotFoundError(f"task folder not found: {source}")
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for copy in target.rglob("*.yaml"):
        config = yaml.load(copy.read_text(), Loader=TaskLoader)  # noqa: S506 - SafeLoader plus one tag
        kwargs = config.get("dataset_kwargs") if isinstance(config, dict) else None
        if kwargs and "data_files" in kwargs:
            original_dir = source / copy.parent.relative_to(target)
            kwargs["data_files"] = _absolute(kwargs["data_files"], original_dir)
            copy.write_text(yaml.dump(config, Dumper=_Dumper, sort_keys=False))
    return target


def run_tasks(
    lm: LM,
    tasks: list[str],
    include_paths: list[Path],
    work_dir: Path,
    limit: int | None = None,
    chat_template: bool = False,
) -> dict[str, Any]:
    """Evaluate ``tasks`` (lm-eval names, from the shipped suite, ``include_paths`` or lm-eval's own
    registry when their data is local) and return lm-eval's results, JSON-ready.

    With ``chat_template`` every prompt goes through ``lm``'s chat template (a fine-tuned chat model),
    few-shot examples as earlier turns (lm-eval's default with a template). The results then record the
    template, as lm-eval's own command line does (``chat_template``, ``chat_template_sha``)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import handle_non_serializable, hash_string

    folders = [SHIPPED_TASKS_DIR, *include_paths]
    resolved = [str(resolve_task_dir(p, Path(work_dir) / f"tasks-{i}")) for i, p in enumerate(folders)]
    manager = TaskManager(include_path=resolved, include_defaults=False)
    if any(t not in manager.all_tasks for t in tasks):  # indexing lm-eval's own tasks takes ~10 s
        manager = TaskManager(include_path=resolved, include_defaults=True)
    unknown = [t for t in tasks if t not in manager.all_tasks]
    if unknown:
        raise ValueError(f"unknown lm-eval tasks {unknown}; the shipped ones are {list(SHIPPED_TASKS)}")
    results = simple_evaluate(
        model=lm,
        tasks=tasks,
        task_manager=manager,
        limit=limit,
        log_samples=False,
        bootstrap_iters=0,
        apply_chat_template=chat_template,
        fewshot_as_multiturn=chat_template,  # only meaningful (and only allowed by lm-eval's CLI) with one
    )
    assert results is not None  # only None on non-zero ranks of a distributed run
    template = lm.chat_template(chat_template) or None
    results["chat_template"] = template
    results["chat_template_sha"] = hash_string(template) if template else None
    results["fewshot_as_multiturn"] = chat_template
    return json.loads(json.dumps(results, default=handle_non_serializable))


def task_scores(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{task: {metric: value}}`` from lm-eval's results: the metric names without their filter suffix
    (``acc,none`` -> ``acc``); standard errors, sample counts and values that are not numbers left out."""
    scores: dict[str, dict[str, float]] = {}
    for task, metrics in results.get("results", {}).items():
        for key, value in metrics.items():
            metric, _, _ = key.partition(",")
            countable = isinstance(value, int | float) and not isinstance(value, bool)
            if countable and "_stderr" not in metric and metric != "sample_len":
                scores.setdefault(task, {})[metric] = float(value)
    return scores
