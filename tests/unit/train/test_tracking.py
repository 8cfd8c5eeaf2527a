"""wandb tracking (``train/tracking.py``), offline as by default: the rest of the tests run with it
disabled (tests/conftest.py), and test_secrets.py tracks a whole run offline with a key set."""

import os

from marin_pipelines.train.tracking import wandb_run


def test_an_offline_run_is_written_resumed_and_leaves_no_service_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    for first_step in (0, 2):  # the second time, as a resumed training run: the same wandb run id
        with wandb_run(tmp_path, {"model": {"d_model": 8}}) as log:
            assert log is not None
            for step in (first_step, first_step + 1):
                log({"step": step, "loss": 5.0 - step, "lr": 1e-3})
        # the service ends with the run: a process launched later must not join it (a killed child's run
        # would stay registered there, and its retry be refused)
        assert "WANDB_SERVICE" not in os.environ
    runs = sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 2 and len({run.name for run in runs}) == 1  # one run id, resumed


def test_disabled_tracking_is_no_callback(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with wandb_run(tmp_path, {}) as log:
        assert log is None
    assert not (tmp_path / "wandb").exists()
