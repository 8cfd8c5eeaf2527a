"""Held-out sets version the evaluations by their content, not by their paths."""

import os

from marin_pipelines.experiment import STAGES, Experiment
from marin_pipelines.experiments.demo import demo


def eval_versions(heldout: dict[str, list[str]]) -> dict[str, str]:
    fields = demo().model_dump()
    fields["evals"]["heldout"] = heldout
    return Experiment.build(**fields).versions


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {stage for stage in STAGES if before[stage] != after[stage]}


def test_editing_a_heldout_file_in_place_re_evaluates_and_only_downstream(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("Lists hold items in order.")
    sets = {"notes": [str(notes)]}
    before = eval_versions(sets)
    os.utime(notes, (0, 0))  # a touch is not an edit
    assert eval_versions(sets) == before
    notes.write_text("Lists hold items in ORDER.")  # same path, same size, new content
    after = eval_versions(sets)
    assert changed(before, after) == {
        "eval_results",
        "ladder_eval_results",
        "scaling_prediction",
        "scaling_law",
    }


def test_a_file_added_to_a_heldout_folder_re_evaluates(tmp_path):
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "a.jsonl").write_text('{"text": "one"}\n')
    sets = {"docs": [str(tmp_path / "sets")]}
    before = eval_versions(sets)
    (tmp_path / "sets" / "b.jsonl").write_text('{"text": "two"}\n')
    assert eval_versions(sets)["eval_results"] != before["eval_results"]


def test_experiments_without_heldout_sets_keep_their_versions():
    assert eval_versions({}) == demo().versions


def test_a_missing_heldout_path_still_versions(tmp_path):
    """Definitions load; the evaluation itself names the missing file when it runs."""
    missing = {"gone": [str(tmp_path / "gone.txt")]}
    assert eval_versions(missing)["eval_results"] != demo().versions["eval_results"]
