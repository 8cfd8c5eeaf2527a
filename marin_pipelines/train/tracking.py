"""Experiment tracking with the wandb SDK: offline by default (``WANDB_MODE=offline``), online when set.

dagster-wandb does not work with wandb >= 0.30, so the trainer's process talks to wandb itself;
``WANDB_MODE=disabled`` turns tracking off. The offline run lives in the output's ``wandb/`` folder,
from where ``wandb sync`` uploads it. wandb writes its files as it goes, which object storage cannot
take: for a ``gs://`` output it writes on local disk and the folder is uploaded when the run ends.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec

from marin_pipelines.store import is_local

PROJECT = "marin-pipelines"
FOLDER = "wandb"


@contextmanager
def wandb_run(
    out_dir: str | os.PathLike[str], config: dict[str, Any]
) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """A callback logging each step's metrics, or None when tracking is disabled."""
    mode = os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")  # the trainer logs its own progress
    if mode == "disabled":
        yield None
        return
    import wandb

    local = is_local(out_dir)
    out = str(Path(out_dir).absolute()) if local else str(out_dir).rstrip("/")
    run_dir = Path(out) if local else Path(tempfile.mkdtemp(prefix="marin-wandb-"))
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", PROJECT),
        id=hashlib.sha256(out.encode()).hexdigest()[:16],  # a resumed run continues its wandb run
        name=out.rsplit("/", 1)[-1],
        dir=run_dir,
        config=config,
        resume="allow",
    )
    try:
        yield lambda record: run.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])
    finally:
        run.finish()
        # the service goes with the run, and with it the WANDB_SERVICE variable it put in this process's
        # environment: else every process launched from here later (a training child, its retry) would
        # join this service, where a killed child's run stays registered and its retry is refused
        wandb.teardown()
        if not local:
            _upload(run_dir / FOLDER, f"{out}/{FOLDER}")
            shutil.rmtree(run_dir, ignore_errors=True)


def _upload(folder: Path, url: str) -> None:
    """Every file under ``folder`` to the same name under ``url`` (a resumed run adds its own run files)."""
    fs, root = fsspec.core.url_to_fs(url)
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        fs.put_file(str(file), f"{root}/{file.relative_to(folder).as_posix()}")
