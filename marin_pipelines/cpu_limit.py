"""How many worker processes this machine, container or pod can really run.

``os.cpu_count()`` is the node's CPU count; a Kubernetes pod limited to 2 CPUs on a 64-core node that
starts 64 workers gets throttled by the kernel and runs out of memory. The limit is the smallest of the
CPUs this process may be scheduled on and the cgroup's CPU quota (v2 ``cpu.max``, v1 ``cfs_quota_us``),
rounded up; ``MARIN_WORKERS`` overrides it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def cgroup_cpu_quota(root: Path = CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in CPUs, or None when there is none (or no cgroup)."""
    try:  # cgroup v2: "max 100000" or "200000 100000"
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass  # no v2 quota file: look for v1's
    try:  # cgroup v1
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def available_cpus(root: Path = CGROUP) -> int:
    """Worker processes to start: ``MARIN_WORKERS``, else min(schedulable CPUs, cgroup quota), at least 1."""
    if os.environ.get("MARIN_WORKERS"):
        workers = int(os.environ["MARIN_WORKERS"])
        if workers < 1:
            raise ValueError(f"MARIN_WORKERS must be a positive integer, got {workers}")
        return workers
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    return max(1, min(cpus, math.ceil(quota)) if quota else cpus)
