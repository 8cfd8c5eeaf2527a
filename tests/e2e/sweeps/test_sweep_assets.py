"""A sweep step in Dagster over the tiny pipeline's data: its trials trained in a launched child, as dynamic
partitions reported as they end (the child's study watched), its summary's counts and plots, the best trial's
config trained by a later step that takes the sweep as an input, a rerun that trains nothing, a sweep whose
every trial fails in its child failing for good, and a failed trial retried from its partition (trained again
in a launched child, its retry's partition reported from the watched study)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from dagster import AssetExecutionContext, AssetKey, AssetRecordsFilter, DagsterInstance, materialize
from sweep_inputs import BAD_LR, GOOD_LR
from tiny_pipeline import MODEL, TRAIN, tiny_run, tiny_tokens

from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.step_assets import asset_key
from marin_pipelines.defs.sweep_assets import trial_partitions, trials_key
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import sweep, train
from marin_pipelines.resources import default_resources
from marin_pipelines.resources.launcher import LocalLauncher
from marin_pipelines.step_runner import InProcessLauncher
from marin_pipelines.store import ArtifactStore
from marin_pipelines.sweeps.launch_config import SweepLaunch

# the grid's order for seed 6 is good, bad, good (as in tests/e2e/sweeps/test_sweep.py): the median pruner
# (after one finished trial) prunes the bad learning rate at its first report; the two good trials report the
# same losses (log_every changes nothing the run computes), so the best is trial 0
SPACE = {"train.learning_rate": [GOOD_LR, BAD_LR], "train.log_every": [5, 10]}
SETTINGS = {
    "trials": 3,
    "sampler": "grid",
    "pruner": "median",
    "seed": 6,
    "report_every": 5,
    "startup_trials": 1,
}


def values(metadata: dict) -> dict:
    return {key: getattr(value, "value", value) for key, value in metadata.items()}


def trial_events(instance: DagsterInstance, key: AssetKey) -> dict[str, list[dict]]:
    """Partition -> the metadata of each materialisation of the trials asset, oldest first."""
    records = instance.fetch_materializations(AssetRecordsFilter(key), limit=100).records
    out: dict[str, list[dict]] = {}
    for record in sorted(records, key=lambda r: r.storage_id):
        event = record.asset_materialization
        out.setdefault(event.partition, []).append(values(event.metadata))
    return out


def mtimes(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("metrics.jsonl")}


class SweepsHere(LocalLauncher):
    """Sweeps in the test's process, where a trial's training can be patched; the rest launched as ever."""

    def sweep(self, context: AssetExecutionContext, launch: SweepLaunch) -> list:
        return InProcessLauncher().sweep(launch)


def not_here(*args, **kwargs):
    raise AssertionError("a trial trained in the Dagster process: the launched child trains them")


@pytest.fixture(scope="module")
def swept(tiny_store):
    """The sweep materialised once in an instance of its own (its trials trained in the launched child, the
    study watched every tenth of a second), and what the tests read of it."""
    tokens = tiny_tokens()
    lr = sweep("sweepstep/lr", base=tiny_run(tokens, "sweepstep/base"), space=SPACE, **SETTINGS)
    best = train("sweepstep/best", tokens, model=MODEL, train=TRAIN, best_of=lr.best)
    assets = list(experiment_definitions([Experiment("sweepstep", steps=[best])]).assets)
    instance, resources = DagsterInstance.ephemeral(), default_resources(tiny_store)

    def run(key: AssetKey, **options):
        return materialize(assets, selection=[key], instance=instance, resources=resources, **options)

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr("marin_pipelines.sweeps.trial.train_launched", not_here)
        patched.setattr("marin_pipelines.sweeps.watch.WATCH_SECONDS", 0.1)
        result = run(asset_key(lr.step))
    artifact = ArtifactStore(tiny_store).get(lr.step.key, lr.step.version)
    return SimpleNamespace(lr=lr, best=best, run=run, instance=instance, result=result, artifact=artifact)


def test_each_trial_is_a_partition_reported_as_it_ends_and_the_summary_counts_them(swept):
    assert swept.result.success and swept.artifact is not None
    partitions = swept.instance.get_dynamic_partitions(trial_partitions(swept.lr.step).name)
    assert partitions == ["0000", "0001", "0002"]
    events = trial_events(swept.instance, trials_key(swept.lr.step))
    assert sorted(events) == partitions and all(len(e) == 1 for e in events.values())  # each once
    states = {key: e[0]["state"] for key, e in events.items()}
    assert states == {"0000": "complete", "0001": "pruned", "0002": "complete"}
    output = Path(swept.artifact.url)
    for key, [trial] in events.items():
        assert trial["params"]["train.learning_rate"] == (BAD_LR if key == "0001" else GOOD_LR)
        assert (trial["steps"] < 20) == (key == "0001") and trial["flops"] > 0
        assert trial["loss_curve"].startswith("![loss curve](data:image/png;base64,")
        assert trial["path"].endswith(f"/trials/{key}")  # the run folder (then in the work folder)
        assert (output / "trials" / key / "metrics.jsonl").is_file()

    metadata = swept.artifact.metadata
    assert (metadata["complete"], metadata["pruned"], metadata["failed"]) == (2, 1, 0)
    assert (metadata["best_trial"], metadata["best_params"]["train.learning_rate"]) == (0, GOOD_LR)
    assert metadata["best_value"] == pytest.approx(events["0000"][0]["value"], rel=1e-3)  # the UI: 4 digits
    shown = sum(e[0]["flops"] for e in events.values())  # each trial's FLOPs shown to 3 digits
    assert metadata["flops"] == pytest.approx(shown, rel=1e-2)
    [summary] = [
        values(e.materialization.metadata)
        for e in swept.result.get_asset_materialization_events()
        if e.materialization.asset_key == asset_key(swept.lr.step)
    ]
    assert summary["reused"] is False and summary["complete"] == 2 and summary["pruned"] == 1
    for plot in ("history", "params", "curves"):
        assert summary[plot].startswith(f"![{plot}](data:image/png;base64,")
    assert "| 1 | pruned | 1e-06 | " in summary["trials"]
    for name in ("study.journal", "trials.parquet", "best.json", "summary.json", "sweep_launch.json"):
        assert (output / name).is_file()
    assert not (output / "failed.json").exists()


def test_the_trials_train_in_the_launched_child_and_are_reported_while_it_runs(swept):
    # the parent's training was patched to fail (the fixture): every trial complete or pruned, so not here
    assert SweepLaunch.read(f"{swept.artifact.url}/sweep_launch.json").out.endswith(".work")
    records = swept.instance.fetch_materializations(AssetRecordsFilter(trials_key(swept.lr.step)), limit=10)
    reported = {r.asset_materialization.partition: r.timestamp for r in records.records}
    # trial 0000 told while the child still trained trial 0002 (its train.json: written as it ended)
    last = Path(swept.artifact.url) / "trials" / "0002" / "train.json"
    assert reported["0000"] < last.stat().st_mtime


def test_a_training_step_takes_the_best_trials_config_from_the_sweep(swept):
    assert swept.best.inputs["best_of"] is swept.lr.step  # one edge in the graph
    assert swept.run(asset_key(swept.best)).success
    store = ArtifactStore(Path(swept.artifact.url).parents[3])
    run = store.get(swept.best.key, swept.best.version)
    best = json.loads((Path(swept.artifact.url) / "best.json").read_text())
    trained = json.loads((Path(run.url) / "train.json").read_text())["config"]
    assert trained["learning_rate"] == best["params"]["train.learning_rate"] == GOOD_LR
    assert trained["log_every"] == best["params"]["train.log_every"]
    assert trained["steps"] == TRAIN["steps"] and swept.best.config.train.learning_rate != GOOD_LR
    assert run.metadata["best_of"] == {
        "sweep": "sweepstep/lr",
        **{k: best[k] for k in ("trial", "value", "params", "metric")},
    }


def test_a_rerun_reuses_the_sweep_and_a_trial_alone_is_read_from_it(swept):
    output = Path(swept.artifact.url)
    before, reported = mtimes(output), trial_events(swept.instance, trials_key(swept.lr.step))
    again = swept.run(asset_key(swept.lr.step))
    [summary] = [values(e.materialization.metadata) for e in again.get_asset_materialization_events()]
    assert summary["reused"] is True and summary["complete"] == 2
    assert trial_events(swept.instance, trials_key(swept.lr.step)) == reported  # nothing new to report

    alone = swept.run(trials_key(swept.lr.step), partition_key="0001")
    assert alone.success
    [trial] = [values(e.materialization.metadata) for e in alone.get_asset_materialization_events()]
    assert trial["state"] == "pruned" and trial["path"] == f"{output}/trials/0001"
    assert mtimes(output) == before  # nothing trained


def two_trials(tiny_store: str, name: str, space: dict | None = None, here: bool = True, **settings):
    """A sweep of two good learning rates (or ``space``) in an instance of its own, and how to materialise
    its assets; its trials trained in this process (``here``, where a test patches their training), else
    in the launched child (``run(key, child=True)``: for that run only)."""
    space = space or {"train.learning_rate": [GOOD_LR, 0.01]}
    base = tiny_run(tiny_tokens(), "sweepstep/base")
    swept = sweep(name, base=base, space=space, trials=2, sampler="grid", pruner="none", **settings)
    assets = list(experiment_definitions([Experiment("two_trials", steps=[swept.step])]).assets)
    instance, resources = DagsterInstance.ephemeral(), default_resources(tiny_store)
    launched = {**resources}
    if here:
        resources["launcher"] = SweepsHere()

    def run(key: AssetKey, child: bool = False, **options):
        chosen = launched if child else resources
        return materialize(assets, selection=[key], instance=instance, resources=chosen, **options)

    return swept, run, instance


def test_a_failed_trial_is_trained_again_from_its_partition_and_the_sweep_then_finishes(
    tiny_store, monkeypatch
):
    flaky, run, instance = two_trials(tiny_store, "sweepstep/flaky")

    def disk_full(*args, **kwargs):
        raise OSError("disk full")

    with monkeypatch.context() as patched:  # every trial fails: so does the sweep, its output not made
        patched.setattr("marin_pipelines.sweeps.trial.train_launched", disk_full)
        failed = run(asset_key(flaky.step), raise_on_error=False)
    assert not failed.success
    store = ArtifactStore(tiny_store)
    assert store.get(flaky.step.key, flaky.step.version) is None
    key = trials_key(flaky.step)
    events = trial_events(instance, key)
    assert {k: e[0]["state"] for k, e in events.items()} == {"0000": "failed", "0001": "failed"}
    assert "OSError: disk full" in events["0000"][0]["error"]

    with monkeypatch.context() as patched:  # the UI's retry of the failed trial, trained in a launched child
        patched.setattr("marin_pipelines.sweeps.trial.train_launched", not_here)
        patched.setattr("marin_pipelines.sweeps.watch.WATCH_SECONDS", 0.1)
        retried = run(key, partition_key="0000", child=True)
    assert retried.success
    work = Path(store.work_url(flaky.step.key, flaky.step.version))
    assert SweepLaunch.read(str(work / "trial_0000_launch.json")).trial == 0
    assert [row["number"] for row in json.loads((work / "trial_0000.json").read_text())["rows"]] == [0, 2]
    events = trial_events(instance, key)
    assert instance.get_dynamic_partitions(trial_partitions(flaky.step).name) == ["0000", "0001", "0002"]
    assert events["0000"][-1]["retried_as"] == "0002" and events["0000"][-1]["state"] == "failed"
    assert [e["state"] for e in events["0002"]] == ["complete"]
    assert events["0002"][0]["params"] == events["0000"][0]["params"]

    finished = run(asset_key(flaky.step))  # continues the study: trains nothing, finishes
    assert finished.success
    metadata = store.get(flaky.step.key, flaky.step.version).metadata
    assert (metadata["complete"], metadata["pruned"], metadata["failed"], metadata["best_trial"]) == (
        1,
        0,
        2,
        2,
    )
    assert len(trial_events(instance, key)["0002"]) == 1  # reported once, by the run that trained it


def test_a_sweep_whose_every_trial_fails_in_its_child_fails_for_good(tiny_store):
    # valid configs that the data refuses as each trial resolves its model (the cache has 512 token ids)
    space = {"model.vocab_size": [100, 200]}
    broken, run, instance = two_trials(tiny_store, "sweepstep/broken", space, here=False)
    failed = run(asset_key(broken.step), raise_on_error=False)
    assert not failed.success
    [failure] = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.step_failure_data.error.message
    assert "every trial of the sweep in" in error and "is below the data's vocab (512)" in error
    assert not any(e.event_type_value == "STEP_UP_FOR_RETRY" for e in failed.all_events)
    events = trial_events(instance, trials_key(broken.step))
    assert {k: [e["state"] for e in v] for k, v in events.items()} == {"0000": ["failed"], "0001": ["failed"]}


class Killed(BaseException):
    """What a killed run's trial sees: no exception that its trial records as failed."""


def test_a_trial_left_running_by_a_killed_run_is_resumed_from_its_partition(tiny_store, monkeypatch):
    killed, run, instance = two_trials(tiny_store, "sweepstep/killed", seed=1)  # seed: another version

    def kill(*args, **kwargs):
        raise Killed

    with monkeypatch.context() as patched, pytest.raises(Killed):  # the run dies in its first trial
        patched.setattr("marin_pipelines.sweeps.trial.train_launched", kill)
        run(asset_key(killed.step))
    key = trials_key(killed.step)
    assert instance.get_dynamic_partitions(trial_partitions(killed.step).name) == ["0000"]
    assert trial_events(instance, key) == {}  # started, never ended

    resumed = run(key, partition_key="0000")  # the UI's materialisation of the trial: its worker is gone
    assert resumed.success
    assert [e["state"] for e in trial_events(instance, key)["0000"]] == ["complete"]

    finished = run(asset_key(killed.step))  # the sweep, run again, trains the trial left and finishes
    assert finished.success
    metadata = ArtifactStore(tiny_store).get(killed.step.key, killed.step.version).metadata
    assert (metadata["complete"], metadata["failed"]) == (2, 0)
    events = trial_events(instance, key)
    assert {k: [e["state"] for e in v] for k, v in events.items()} == {
        "0000": ["complete"],
        "0001": ["complete"],
    }
