"""Worker counts follow the pod's CPU limit (its cgroup quota), not the node's CPU count."""

import os

import pytest

from marin_pipelines.cpu_limit import available_cpus, cgroup_cpu_quota


def test_cgroup_v2_quota(tmp_path, monkeypatch):
    monkeypatch.delenv("MARIN_WORKERS", raising=False)
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # a pod limited to 1.5 CPUs
    assert cgroup_cpu_quota(tmp_path) == 1.5
    assert available_cpus(tmp_path) == min(2, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None
    assert available_cpus(tmp_path) == len(os.sched_getaffinity(0))


def test_cgroup_v1_quota(tmp_path, monkeypatch):
    monkeypatch.delenv("MARIN_WORKERS", raising=False)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.0 and available_cpus(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # unlimited
    assert cgroup_cpu_quota(tmp_path) is None


def test_no_cgroup_and_the_override(tmp_path, monkeypatch):
    assert cgroup_cpu_quota(tmp_path / "absent") is None
    monkeypatch.setenv("MARIN_WORKERS", "3")
    assert available_cpus(tmp_path) == 3
    monkeypatch.setenv("MARIN_WORKERS", "0")
    with pytest.raises(ValueError, match="MARIN_WORKERS"):
        available_cpus(tmp_path)
