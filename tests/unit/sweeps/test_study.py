"""The study's pieces: settings, storage, the sweep's identity (another sweep's study refused, naming both),
samplers and pruners, the claims of workers on trials, and the table and plots made from a study."""

import os
import subprocess
import sys

import optuna
import pytest
from optuna.pruners import HyperbandPruner, MedianPruner, NopPruner
from optuna.samplers import GridSampler, RandomSampler, TPESampler
from optuna.storages import JournalStorage, RDBStorage
from optuna.trial import TrialState
from pydantic import ValidationError

from marin_pipelines.lease import Lease, create_new, output_lease, read_lease, this_process
from marin_pipelines.sweeps.claims import Claims, trial_folder
from marin_pipelines.sweeps.plots import sweep_plots
from marin_pipelines.sweeps.settings import SweepSettings
from marin_pipelines.sweeps.space import SearchSpace
from marin_pipelines.sweeps.study import (
    OtherSweep,
    make_pruner,
    make_sampler,
    open_study,
    storage_of,
    trial_seed,
)
from marin_pipelines.sweeps.trial_table import counts, trial_table
from marin_pipelines.train.run_config import RunConfig

BASE = RunConfig(model={"size": "nano", "seq_len": 32}, train={"steps": 20, "warmup_steps": 2})
SPACE = SearchSpace.parse({"train.learning_rate": {"low": 1e-4, "high": 1e-1, "log": True}}, BASE)
IDENTITY = {"base": BASE.model_dump(mode="json"), "data": "abc", "space": SPACE.describe(), "sampler": "tpe"}


def test_a_metric_no_trial_reports_is_refused_naming_those_reported():
    with pytest.raises(ValidationError, match="no trial reports 'accuracy'; trials report val_loss, train_"):
        SweepSettings(trials=4, metric="accuracy")
    settings = SweepSettings(trials=4)
    assert (settings.sampler, settings.pruner, settings.metric) == ("tpe", "hyperband", "val_loss")
    assert settings.reports_every(300) == 30 and settings.reports_every(5) == 1
    assert SweepSettings(trials=4, report_every=7).reports_every(300) == 7


def test_the_study_is_a_journal_beside_the_output_or_in_a_database(tmp_path):
    storage, name, where = storage_of(str(tmp_path / "out"), None)
    assert isinstance(storage, JournalStorage) and where == str(tmp_path / "out" / "study.journal")
    assert (tmp_path / "out" / "study.journal").exists()
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    storage, name, where = storage_of(str(tmp_path / "out"), url)
    assert isinstance(storage, RDBStorage) and name == str(tmp_path / "out")
    with pytest.raises(ValueError, match="a sweep's journal file is a local file.*postgresql://"):
        storage_of("gs://bucket/sweep", None)


@pytest.mark.parametrize("where", ["journal", "sqlite"])
def test_a_study_of_another_sweep_is_refused_naming_both(tmp_path, where):
    storage = None if where == "journal" else f"sqlite:///{tmp_path / 'studies.db'}"
    out = str(tmp_path / "out")
    study = open_study(*storage_of(out, storage), IDENTITY, NopPruner())
    assert study.user_attrs["sweep"]["sampler"] == "tpe"
    found = study.user_attrs["sweep_id"]
    again = open_study(*storage_of(out, storage), IDENTITY, NopPruner())  # the same sweep: continued
    assert again.user_attrs["sweep_id"] == found

    other = {**IDENTITY, "sampler": "random", "data": "xyz"}
    with pytest.raises(OtherSweep) as refused:
        open_study(*storage_of(out, storage), other, NopPruner())
    message = str(refused.value)
    elsewhere = open_study(*storage_of(str(tmp_path / "elsewhere"), None), other, NopPruner())
    asked = elsewhere.user_attrs["sweep_id"]
    assert f"another sweep ({found}) than this one ({asked})" in message
    assert 'data: "abc" there, "xyz" here' in message and 'sampler: "tpe" there, "random" here' in message
    assert (where == "journal") == ("study.journal" in message)


def test_samplers_pruners_and_seeds():
    settings = SweepSettings(trials=4, startup_trials=3)
    tpe = make_sampler(settings, SPACE, 7)
    assert isinstance(tpe, TPESampler) and tpe._n_startup_trials == 3
    random, grid = (settings.model_copy(update={"sampler": name}) for name in ("random", "grid"))
    assert isinstance(make_sampler(random, SPACE, 7), RandomSampler)
    grid_space = SearchSpace.parse({"train.optimizer": ["adamw", "muon"]}, BASE)
    assert isinstance(make_sampler(grid, grid_space, 7), GridSampler)
    with pytest.raises(ValueError, match="grid sampler needs"):
        make_sampler(grid, SPACE, 7)

    hyperband = make_pruner(settings, report_every=10, steps=300)
    assert isinstance(hyperband, HyperbandPruner)
    assert (hyperband._min_resource, hyperband._max_resource, hyperband._reduction_factor) == (10, 300, 3)
    median = make_pruner(settings.model_copy(update={"pruner": "median"}), 10, 300)
    assert isinstance(median, MedianPruner) and median._n_startup_trials == 3
    assert isinstance(make_pruner(settings.model_copy(update={"pruner": "none"}), 10, 300), NopPruner)

    seeds = [trial_seed(0, n) for n in range(20)]
    assert len(set(seeds)) == 20 and seeds == [trial_seed(0, n) for n in range(20)]
    assert trial_seed(1, 0) != trial_seed(0, 0)


def _running(tmp_path, count):
    study = optuna.create_study(storage=storage_of(str(tmp_path), None)[0], study_name="sweep")
    return study, [study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}) for _ in range(count)]


def test_a_trial_a_live_worker_holds_is_not_taken(tmp_path):
    study, trials = _running(tmp_path, 2)
    held = Claims(str(tmp_path)).new(trials[0].number)  # this process: alive
    try:
        claims = Claims(str(tmp_path))
        taken = claims.orphan(study.get_trials())
        assert taken is not None and taken[0].number == 1  # never asked for a lease: its worker died asking
        assert claims.orphan(study.get_trials()) is None  # trial 0 is held, trial 1 now taken by this claim
        taken[1].release()
    finally:
        held.release()


def test_a_trial_whose_worker_was_killed_is_taken_over(tmp_path):
    study, trials = _running(tmp_path, 1)
    ended = [sys.executable, "-c", "import os; print(os.getpid())"]
    dead = subprocess.run(ended, capture_output=True, text=True, check=True)
    fs, path = output_lease(trial_folder(str(tmp_path), trials[0].number))
    owner = {**this_process(command="sweep"), "pid": int(dead.stdout)}
    assert create_new(fs, path, Lease(fs, path, owner, 60.0).record())
    taken = Claims(str(tmp_path)).orphan(study.get_trials())
    assert taken is not None and taken[0].number == 0
    assert read_lease(fs, path)["owner"]["pid"] == os.getpid()
    taken[1].release()
    assert read_lease(fs, path) is None


def test_the_table_counts_and_plots_come_from_the_study(tmp_path):
    study, trials = _running(tmp_path, 4)
    ends = [(TrialState.COMPLETE, 2.0), (TrialState.PRUNED, None), (TrialState.FAIL, None), (None, None)]
    for trial, (state, value) in zip(trials, ends, strict=True):
        trial.report(3.0 + trial.number, 5)
        trial.set_user_attr("steps", 5 if state == TrialState.PRUNED else 10)
        trial.set_user_attr("flops", 1e6)
        if state == TrialState.FAIL:
            trial.set_user_attr("error", "ValueError: bad")
        if state is not None:
            study.tell(trial.number, value, state=state)
    table = trial_table(study)
    assert table["state"].to_list() == ["complete", "pruned", "failed", "running"]
    assert table["value"].to_list() == [2.0, 4.0, 5.0, 6.0]
    assert table["error"].to_list() == [None, None, "ValueError: bad", None]
    assert table["params"].struct.field("x").to_list() == [t.params["x"] for t in trials]
    assert table["flops"].sum() == 4e6
    assert counts(study) == {"complete": 1, "pruned": 1, "failed": 1}
    plots = sweep_plots(study, "val_loss")
    assert sorted(plots) == ["curves.png", "history.png", "params.png"]
    assert all(png[:4] == b"\x89PNG" for png in plots.values())
