"""The leaderboard in Dagster: a run from the command line evaluated by the sensor once, the table rebuilt by
declarative automation when an evaluation lands, and the asset's page."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    Definitions,
    SensorResult,
    SkipReason,
    build_sensor_context,
    evaluate_automation_conditions,
    materialize,
)

from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.leaderboard import LEADERBOARD_KEY, RUNS, leaderboard_definitions
from marin_pipelines.evals import leaderboard as lb
from marin_pipelines.experiments import demo
from marin_pipelines.resources import default_resources
from marin_pipelines.resources.store import ArtifactStoreResource
from marin_pipelines.store import MANIFEST, ArtifactStore


def complete(tiny_store: str, step: str) -> Path:
    return next(p for p in Path(tiny_store, *step.split("/"), "_").iterdir() if (p / MANIFEST).is_file())


@pytest.fixture
def evaluated_store(tiny_store: str, tmp_path: Path) -> str:
    """The tiny pipeline's run and its evaluation, copied where they were (the shared store stays as is)."""
    for step in ("tiny/run", "tiny/eval"):
        found = complete(tiny_store, step)
        shutil.copytree(found, tmp_path / "store" / found.relative_to(tiny_store))
    return str(tmp_path / "store")


@pytest.fixture
def cli_store(tiny_store: str, tmp_path: Path) -> ArtifactStore:
    """A store holding one run made by `marin-pipelines train --out STORE/runs/mine`: the tiny pipeline's run
    folder as that command leaves it (no manifest: no step made it)."""
    shutil.copytree(
        complete(tiny_store, "tiny/run"),
        tmp_path / "store" / "runs" / "mine",
        ignore=shutil.ignore_patterns(MANIFEST),
    )
    return ArtifactStore(tmp_path / "store")


def apply_partitions(instance: DagsterInstance, result: SensorResult) -> None:
    """What the daemon does with a sensor's dynamic partition requests."""
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))


def test_a_run_made_by_the_command_line_is_evaluated_once_by_itself(cli_store):
    parts = leaderboard_definitions([], None)
    sensor = next(s for s in parts["sensors"] if s.name == "new_runs_evaluated")
    assert "Off by default here" in sensor.description
    instance = DagsterInstance.ephemeral()
    resources = {"store": ArtifactStoreResource(root=cli_store.root)}

    result = sensor(build_sensor_context(instance=instance, resources=resources))
    assert [r.partition_key for r in result.run_requests] == ["runs/mine"]
    assert result.run_requests[0].tags["marin/experiment"] == lb.COMMAND_LINE
    apply_partitions(instance, result)
    assert instance.get_dynamic_partitions(RUNS.name) == ["runs/mine"]
    again = sensor(build_sensor_context(instance=instance, resources=resources, cursor=result.cursor))
    assert isinstance(again, SkipReason)  # asked for already: not asked again while it runs

    standard = next(a for a in parts["assets"] if a.key == AssetKey(["leaderboard", "standard_eval"]))
    done = materialize(
        [standard], partition_key="runs/mine", instance=instance, resources=default_resources(cli_store.root)
    )
    assert done.success
    fresh = sensor(build_sensor_context(instance=instance, resources=resources))  # a new cursor: a redeploy
    assert isinstance(fresh, SkipReason)  # evaluated on this suite: never again

    board = lb.leaderboard(cli_store)
    [row] = board.models
    assert (row.key, row.experiments) == ("runs/mine", [lb.COMMAND_LINE])
    qa = next(s for (k, c), s in board.cells.items() if c.metric == "marin_python_qa/exact_match")
    assert qa.status == lb.VALID and qa.evaluation.startswith("leaderboard/standard_eval/runs/mine/")
    assert any(c.metric == "bpb" for c in board.columns)  # on the cache it trained on


def test_a_run_landing_after_the_first_was_requested_is_requested_alone_and_once(cli_store, monkeypatch):
    def read_store(_):
        raise AssertionError("the sensor reads every evaluation's results")

    monkeypatch.setattr(lb, "read_store", read_store)  # it lists the finished runs only
    sensor = next(s for s in leaderboard_definitions([], None)["sensors"] if s.name == "new_runs_evaluated")
    instance = DagsterInstance.ephemeral()
    resources = {"store": ArtifactStoreResource(root=cli_store.root)}
    first = sensor(build_sensor_context(instance=instance, resources=resources))
    apply_partitions(instance, first)
    shutil.copytree(Path(cli_store.root, "runs", "mine"), Path(cli_store.root, "runs", "later"))

    second = sensor(build_sensor_context(instance=instance, resources=resources, cursor=first.cursor))
    assert [r.partition_key for r in second.run_requests] == ["runs/later"]  # not the first again
    [added] = second.dynamic_partitions_requests
    assert list(added.partition_keys) == ["runs/later"]
    apply_partitions(instance, second)
    assert sorted(instance.get_dynamic_partitions(RUNS.name)) == ["runs/later", "runs/mine"]
    third = sensor(build_sensor_context(instance=instance, resources=resources, cursor=second.cursor))
    assert isinstance(third, SkipReason) and "among the 2 finished" in third.skip_message


def test_the_leaderboard_rebuilds_when_an_evaluation_lands_and_opens_with_its_table(evaluated_store):
    defs = Definitions.merge(experiment_definitions([demo.demo]), Definitions(resources=default_resources()))
    assert "leaderboard_updates" in {s.name for s in defs.sensors}
    instance = DagsterInstance.ephemeral()
    result = evaluate_automation_conditions(defs, instance)
    assert not result.get_num_requested(LEADERBOARD_KEY)  # nothing evaluated yet
    instance.report_runless_asset_event(AssetMaterialization(AssetKey(demo.target.evaluation.key)))
    result = evaluate_automation_conditions(defs, instance, cursor=result.cursor)
    assert result.get_num_requested(LEADERBOARD_KEY) == 1

    board = next(a for a in leaderboard_definitions([], None)["assets"] if a.key == LEADERBOARD_KEY)
    done = materialize([board], resources=default_resources(evaluated_store))
    metadata = done.asset_materializations_for_node("leaderboard")[0].metadata
    assert list(metadata)[0] == "leaderboard"  # the table first
    assert "tiny/run" in metadata["leaderboard"].value and "| rank | model | version | experiment |" in (
        metadata["leaderboard"].value
    )
    table = json.loads(Path(metadata["path"].value, lb.DATA).read_text())
    assert [r["names"] for r in table["rows"]] == [["tiny/run"]]
    assert Path(metadata["table"].value).is_file()

    config = {"ops": {"leaderboard": {"config": {"experiment": "another"}}}}  # the launchpad's filter
    done = materialize([board], resources=default_resources(evaluated_store), run_config=config)
    shown = done.asset_materializations_for_node("leaderboard")[0].metadata["leaderboard"].value
    assert "tiny/run" not in shown and "The 0 of 1 models of experiment another only." in shown


def test_the_sensor_is_off_on_a_laptop_and_on_in_production(monkeypatch):
    from dagster import DefaultSensorStatus

    from marin_pipelines.defs.leaderboard import EVALUATE_NEW_RUNS, new_runs_sensor

    monkeypatch.delenv(EVALUATE_NEW_RUNS, raising=False)
    assert new_runs_sensor("job").default_status == DefaultSensorStatus.STOPPED
    deployed = yaml.safe_load(Path(__file__).parents[3].joinpath("deploy/k8s/marin-env.yaml").read_text())
    monkeypatch.setenv(EVALUATE_NEW_RUNS, deployed["data"][EVALUATE_NEW_RUNS])
    sensor = new_runs_sensor("job")
    assert sensor.default_status == DefaultSensorStatus.RUNNING and "On by default here" in sensor.description
