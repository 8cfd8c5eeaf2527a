"""A launched sweep (``marin-pipelines sweep --step-config FILE``, or the in-process launcher): ``run_sweep``
on a ``SweepLaunch``, whose outcome the launcher's caller reads back from the folder, not from the process.

The sweep writes ``summary.json`` there as it ends (``sweeps.sweep``): ``read_result`` reads the counts,
the FLOPs and the best trial from it. A sweep that cannot succeed (every trial failed, or bad input: a
``SweepFailed`` or ``ValueError``, which no retry helps) writes ``failed.json`` with the reason before it
raises: ``read_failure`` tells that from a failure a retry may mend (a killed pod). A journal kept outside
the folder (a bucket store's, in the local cache) is copied into it as the sweep ends, from the process
that wrote it (the launched one: a pod's local cache is its own).
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
    """The sweep, run here; its ``SweepResult``. Its failure that no retry mends is written down first."""
    from marin_pipelines.sweeps.sweep import SweepFailed, run_sweep  # JAX: where the sweep runs

    try:
        result = run_sweep(**launch.arguments())
    except (SweepFailed, ValueError) as e:
        write_url(f"{launch.folder}/{FAILED_FILE}", json.dumps({"error": str(e)}, indent=2))
        raise
    journal, kept = launch.storage_url(), f"{launch.folder}/{JOURNAL_FILE}"
    if journal is not None and "://" not in journal and Path(journal).resolve() != Path(kept).resolve():
        write_url(kept, Path(journal).read_bytes())  # a URL's Path is no local file: never the same
    return result


def read_result(folder: str) -> dict[str, Any]:
    """The ended sweep's ``summary.json`` in ``folder``: ``best`` (params, value, trial; None while no trial
    completed), ``trials`` (complete, pruned, failed) and ``flops``."""
    from marin_pipelines.sweeps.sweep import SUMMARY_FILE

    return json.loads(read_url(f"{folder.rstrip('/')}/{SUMMARY_FILE}"))


def read_failure(folder: str) -> str | None:
    """Why the sweep in ``folder`` failed for good (``failed.json``), or None."""
    try:
        return json.loads(read_url(f"{folder.rstrip('/')}/{FAILED_FILE}"))["error"]
    except FileNotFoundError:
        return None


def forget_failure(folder: str) -> None:
    """Remove an earlier attempt's ``failed.json``: the next one's outcome is its own."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(f"{folder.rstrip('/')}/{FAILED_FILE}")
    if fs.exists(path):
        fs.rm_file(path)
