"""A launched sweep (``marin-pipelines sweep --step-config FILE``, or the in-process launcher): ``run_sweep``
on a ``SweepLaunch``, whose outcome the launcher's caller reads back from the folder, not from the process.

The sweep writes ``summary.json`` there as it ends (``sweeps.sweep``): ``read_result`` reads the counts,
the FLOPs and the best trial from it. A sweep that cannot succeed (every trial failed, or bad input: a
``SweepFailed`` or ``ValueError``, which no retry helps) writes ``failed.json`` with the reason before it
raises: ``read_failure`` tells that from a failure a retry may mend (a killed pod). A journal kept outside
the folder (a bucket store's, in the local cache) is copied into it as the sweep ends, from the process
that wrote it (the launched one: a pod's local cache is its own).

A ``SweepLaunch`` with ``trial`` finishes that one trial instead (``run_one``) and writes its outcome to
``trial_NNNN.json`` in the folder: its rows (the trial's, then its retry's, where a failed trial was trained
again), or the error no retry mends (no trial of that number, bad input); ``read_trial`` reads it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from marin_pipelines.store import read_url, write_url
from marin_pipelines.sweeps.launch_config import SweepLaunch
from marin_pipelines.sweeps.study import JOURNAL_FILE

FAILED_FILE = "failed.json"


def sweep_launched(launch: SweepLaunch) -> Any:
    """The sweep, run here; its ``SweepResult`` (the trial's rows, for a launch of one trial). Its failure
    that no retry mends is written down first."""
    from marin_pipelines.sweeps.sweep import SweepFailed, run_sweep  # JAX: where the sweep runs

    if launch.trial is not None:
        return trial_launched(launch, launch.trial)
    try:
        result = run_sweep(**launch.arguments())
    except (SweepFailed, ValueError) as e:
        write_url(f"{launch.folder}/{FAILED_FILE}", json.dumps({"error": str(e)}, indent=2))
        raise
    journal, kept = launch.storage_url(), f"{launch.folder}/{JOURNAL_FILE}"
    if journal is not None and "://" not in journal and Path(journal).resolve() != Path(kept).resolve():
        write_url(kept, Path(journal).read_bytes())  # a URL's Path is no local file: never the same
    return result


def trial_file(folder: str, number: int) -> str:
    """Where a launched trial's outcome goes: ``trial_NNNN.json`` in the sweep's folder."""
    return f"{folder.rstrip('/')}/trial_{number:04d}.json"


def trial_launched(launch: SweepLaunch, number: int) -> list[dict[str, Any]]:
    """The launch's trial ``number``, finished here (``run_one``); its rows, also written to its file, as is a
    failure that no retry mends (a ``ValueError``: no trial of that number, bad input) before it is raised."""
    from marin_pipelines.sweeps.plan import SweepPlan  # JAX: where the trial trains
    from marin_pipelines.sweeps.sweep import run_one

    arguments = {name: value for name, value in launch.arguments().items() if name != "workers"}
    outcome = trial_file(launch.folder, number)
    try:
        rows = run_one(SweepPlan.make(**arguments), number)
    except ValueError as e:
        write_url(outcome, json.dumps({"error": str(e)}, indent=2))
        raise
    write_url(outcome, json.dumps({"rows": rows}, indent=2))
    return rows


def read_trial(folder: str, number: int) -> dict[str, Any]:
    """A launched trial's outcome (``trial_NNNN.json``): ``{"rows": [...]}`` (its row, then its retry's) or
    ``{"error": ...}``; an empty dict where there is none (its child was killed)."""
    try:
        return json.loads(read_url(trial_file(folder, number)))
    except FileNotFoundError:
        return {}


def read_result(folder: str) -> dict[str, Any]:
    """The ended sweep's ``summary.json`` in ``folder``: ``best`` (params, value, trial; None while no trial
    completed), ``trials`` (complete, pruned, failed) and ``flops``."""
    from marin_pipelines.sweeps.sweep import SUMMARY_FILE

    return json.loads(read_url(f"{folder.rstrip('/')}/{SUMMARY_FILE}"))


def read_failure(folder: str, trial: int | None = None) -> str | None:
    """Why the sweep in ``folder`` (or its launched ``trial``) failed for good: ``failed.json`` (or the error
    in ``trial_NNNN.json``); None where nothing was written down (a killed child, or no failure)."""
    if trial is not None:
        return read_trial(folder, trial).get("error")
    try:
        return json.loads(read_url(f"{folder.rstrip('/')}/{FAILED_FILE}"))["error"]
    except FileNotFoundError:
        return None


def forget_outcome(folder: str, trial: int | None = None) -> None:
    """Remove what an earlier launch of the sweep (or of its ``trial``) wrote down (``failed.json``,
    ``trial_NNNN.json``), so that what is read after the next launch is its own."""
    import fsspec

    url = f"{folder.rstrip('/')}/{FAILED_FILE}" if trial is None else trial_file(folder, trial)
    fs, path = fsspec.core.url_to_fs(url)
    if fs.exists(path):
        fs.rm_file(path)
