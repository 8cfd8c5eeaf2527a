"""The command line records its runs in the instance the UI shows: ``DAGSTER_HOME``'s, else the project
folder's (its dagster.yaml), never a throwaway one; without either it stops and says how to name one."""

import os

import pytest

from marin_pipelines.cli import main
from marin_pipelines.defs.instance import NoInstanceError, project_instance


def test_without_dagster_home_the_project_folder_is_the_instance(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = project_instance()
    assert os.environ["DAGSTER_HOME"] == str(tmp_path)  # for the runs and children it starts
    assert instance.is_persistent and instance.root_directory == str(tmp_path)


def test_without_an_instance_the_command_says_how_to_name_one(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)  # no dagster.yaml here
    with pytest.raises(NoInstanceError, match=f"DAGSTER_HOME is unset and {tmp_path} has no dagster.yaml"):
        project_instance()
    assert main(["experiment", "demo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no Dagster instance to record this run in" in err


def test_an_instance_that_cannot_be_opened_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text("storage: [not, a, mapping]\n")
    with pytest.raises(NoInstanceError, match=f"cannot open the Dagster instance in {tmp_path}"):
        project_instance()
