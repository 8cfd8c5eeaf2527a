"""A launched evaluation's work, wherever it runs: the child of a launcher (``cli/eval.py``) or the step
runner's own process (``step_runner.InProcessLauncher``)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from typing import Any

from marin_pipelines.evals.checkpoint_eval import evaluate_checkpoint, load_for_eval, scores
from marin_pipelines.evals.launch_config import EvalLaunch
from marin_pipelines.store import write_url
from marin_pipelines.train.trained_run import checkpoint_template, find_tokenizer


def evaluate_launched(launch: EvalLaunch, progress: Callable[[str], None]) -> dict[str, Any]:
    """Evaluate ``launch``'s checkpoint on its sets and tasks and write the results file ``launch.out``;
    the results. ``progress`` hears a line as each part finishes."""
    config = launch.evals
    model, tokenizer, specials = load_for_eval(launch.checkpoint, launch.tokenizer)
    results = evaluate_checkpoint(
        model,
        tokenizer,
        launch.bpb,
        config,
        launch.batch_size,
        progress,
        config.chat,
        launch.chat_template or checkpoint_template(launch.checkpoint),
        chat_tasks=config.chat_tasks,
        specials=specials,
        served_run=launch.checkpoint,
        tokenizer_file=str(launch.tokenizer or find_tokenizer(launch.checkpoint)),
    )
    write_url(launch.out, json.dumps(results, indent=2))
    return results


def summary_message(results: dict[str, Any]) -> dict[str, Any]:
    """What the evaluation reports to whoever launched it: its scores and the machine that computed them
    (the UI shows where a number came from)."""
    import jax

    devices = jax.devices()
    where = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "devices": f"{len(devices)} x {devices[0].device_kind}",
    }
    return {"scores": scores(results), "evaluated_on": where}
