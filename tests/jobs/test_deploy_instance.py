"""deploy/dagster.yaml, the production instance, is valid for this Dagster: no cluster needed to check it."""

import importlib
from pathlib import Path

import pytest
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config

DEPLOY = Path(__file__).parents[2] / "deploy"
ENV = ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB", "MARIN_LOG_BUCKET")


@pytest.fixture
def instance_config(monkeypatch):
    for name in ENV:
        monkeypatch.setenv(name, "x")
    config, _ = dagster_instance_config(str(DEPLOY))  # the instance schema: storage, keys, env references
    return config


@pytest.mark.parametrize("section", ["run_launcher", "run_coordinator", "compute_logs"])
def test_each_pluggable_class_imports_and_accepts_its_config(instance_config, section):
    block = instance_config[section]
    cls = getattr(importlib.import_module(block["module"]), block["class"])
    result = process_config(cls.config_type(), block["config"])
    assert result.success, result.errors
    misspelt = {**block["config"], "max_concurent_runs": 1}
    assert not process_config(cls.config_type(), misspelt).success  # the check can fail


def test_production_runs_on_kubernetes_with_postgres(instance_config):
    assert instance_config["run_launcher"]["class"] == "K8sRunLauncher"
    assert set(instance_config["storage"]) == {"postgres"}
    limits = instance_config["run_coordinator"]["config"]["tag_concurrency_limits"]
    assert {"key": "marin/crawl_queue", "limit": 1} in limits  # snapshots dedup in order, as locally
