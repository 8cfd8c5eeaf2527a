"""A launched sweep's file (``SweepLaunch``: a database URL kept out of it; one trial's a file of its own, its
failure written down for the launching process) and the watch of its study from
the launching process: each trial told once as it is first seen and once as it is first seen finished, the
trials an earlier attempt finished not told again, a study not there yet simply not seen."""

import json

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from marin_pipelines.sweeps.launch_config import SweepLaunch
from marin_pipelines.sweeps.launched import read_trial, sweep_launched
from marin_pipelines.sweeps.settings import SweepSettings
from marin_pipelines.sweeps.study import JOURNAL_FILE, JOURNAL_STUDY
from marin_pipelines.sweeps.watch import StudyWatch, watching
from marin_pipelines.train.run_config import RunConfig

BASE = RunConfig(model={"size": "nano", "seq_len": 32}, train={"steps": 20, "warmup_steps": 2})


def launch(tmp_path, **fields) -> SweepLaunch:
    space = {"train.learning_rate": [0.01, 0.03]}
    settings = SweepSettings(trials=2, sampler="grid")
    return SweepLaunch(base=BASE, data="cache", space=space, settings=settings, out=str(tmp_path), **fields)


def test_a_database_url_from_the_environment_stays_out_of_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEP_DB", "postgresql://user:secret@host/sweeps")
    told = launch(tmp_path, storage_from="SWEEP_DB")
    assert told.arguments()["storage"] == "postgresql://user:secret@host/sweeps"
    assert told.env() == {"SWEEP_DB": "postgresql://user:secret@host/sweeps"}
    args = told.write()
    assert args[-2:] == ["--step-config", f"{tmp_path}/sweep_launch.json"]
    written = (tmp_path / "sweep_launch.json").read_text()
    assert "secret" not in written and json.loads(written)["storage_from"] == "SWEEP_DB"
    assert SweepLaunch.read(args[-1]) == told
    monkeypatch.delenv("SWEEP_DB")
    with pytest.raises(ValueError, match=r"database URL is in \$SWEEP_DB: not set"):
        told.arguments()
    with pytest.raises(ValueError, match="storage and storage_from: one or the other"):
        launch(tmp_path, storage="sqlite:///x.db", storage_from="SWEEP_DB")


def test_one_trial_is_launched_from_a_file_of_its_own_and_its_failure_written_down(tmp_path):
    sweep_args = launch(tmp_path).write()
    trial = launch(tmp_path, trial=7)
    args = trial.write()
    assert args[-1] == f"{tmp_path}/trial_0007_launch.json" and sweep_args[-1] != args[-1]
    assert SweepLaunch.read(args[-1]).trial == 7 and SweepLaunch.read(sweep_args[-1]).trial is None
    assert read_trial(str(tmp_path), 7) == {}  # not launched yet
    bad = trial.model_copy(update={"space": {"train.no_such_field": [1, 2]}})
    with pytest.raises(ValueError) as raised:  # bad input, which no retry mends
        sweep_launched(bad)
    assert read_trial(str(tmp_path), 7) == {"error": str(raised.value)}
    assert not (tmp_path / "failed.json").exists()  # the sweep's own outcome is not the trial's


def test_the_watch_tells_each_trial_as_it_starts_and_ends_once(tmp_path):
    told: list[tuple[str, int, str]] = []

    def tell(event: str, row: dict) -> None:
        told.append((event, row["number"], row["state"]))

    watch = StudyWatch(str(tmp_path), None, tell)
    watch.begin()  # no study yet: nothing seen, nothing made
    assert told == [] and not (tmp_path / JOURNAL_FILE).exists()

    storage = JournalStorage(JournalFileBackend(str(tmp_path / JOURNAL_FILE)))
    study = optuna.create_study(storage=storage, study_name=JOURNAL_STUDY)
    first = study.ask()
    watch.look()
    study.tell(first, 1.0)
    second = study.ask()
    watch.look()
    watch.look()
    study.tell(second, state=TrialState.PRUNED)
    watch.look()
    assert told == [
        ("started", 0, "running"),
        ("finished", 0, "complete"),
        ("started", 1, "running"),
        ("finished", 1, "pruned"),
    ]

    told.clear()  # another attempt: the trials finished before it are not told again; one running is
    study.ask()
    with watching(str(tmp_path), None, tell):
        study.tell(2, 0.5)
    assert told == [("started", 2, "running"), ("finished", 2, "complete")]
