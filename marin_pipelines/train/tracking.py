"""Experiment tracking with the wandb SDK: offline by default (``WANDB_MODE=offline``), online when set.

dagster-wandb does not work with wandb >= 0.30, so the trainer's process talks to wandb itself;
``WANDB_MODE=disabled`` turns tracking off. The offline run lives in the output's ``wandb/`` folder,
from where ``wandb sync`` uploads it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PROJECT = "marin-pipelines"


@contextmanager
def wandb_run(out_dir: Path, config: dict[str, Any]) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """A callback logging each step's metrics, or None when tracking is disabled."""
    mode = os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")  # the trainer logs its own progress
    if mode == "disabled":
        yield None
        return
    import wandb

    out_dir = Path(out_dir).absolute()
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", PROJECT),
        id=hashlib.sha256(str(out_dir).encode()).hexdigest()[:16],  # a resumed run continues its wandb run
        name=out_dir.name,
        dir=out_dir,
        config=config,
        resume="allow",
    )
    try:
        yield lambda record: run.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])
    finally:
        run.finish()
