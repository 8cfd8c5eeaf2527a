"""Held-out sets version the evaluations by their content, not by their paths."""

import os

from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import forecast_target, isoflop_ladder
from marin_pipelines.steps import topological


def versions(steps) -> dict[str, str]:
    return {step.name: step.version for step in steps}


DEMO = versions(demo.demo.all_steps)


def eval_versions(heldout: dict[str, list[str]]) -> dict[str, str]:
    """Every step's version in the demo declared again with ``heldout`` sets in its evaluations."""
    evals = {**demo.EVALS, "heldout": heldout}
    ladder = isoflop_ladder(
        "demo",
        demo.tokens,
        ladder=demo.ladder.config,
        train=demo.LADDER_TRAIN,
        data_mixture=demo.MIXTURE,
        evals={"heldout": heldout},  # the rungs are scored on bits-per-byte only
    )
    target = forecast_target("demo", ladder, downstream=["bpb/main"], evals=evals)
    return versions(topological([target.scaling_law, demo.leaderboard]))


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    assert before.keys() == after.keys() == DEMO.keys()
    return {name for name in before if before[name] != after[name]}


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
        "demo/eval_results",
        "demo/ladder_eval_results",
        "demo/isoflop_forecast",
        "demo/isoflop_law",
    }


def test_a_file_added_to_a_heldout_folder_re_evaluates(tmp_path):
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "a.jsonl").write_text('{"text": "one"}\n')
    sets = {"docs": [str(tmp_path / "sets")]}
    before = eval_versions(sets)
    (tmp_path / "sets" / "b.jsonl").write_text('{"text": "two"}\n')
    assert eval_versions(sets)["demo/eval_results"] != before["demo/eval_results"]


def test_experiments_without_heldout_sets_keep_their_versions():
    assert eval_versions({}) == DEMO


def test_a_missing_heldout_path_still_versions(tmp_path):
    """Definitions load; the evaluation itself names the missing file when it runs."""
    missing = {"gone": [str(tmp_path / "gone.txt")]}
    assert eval_versions(missing)["demo/eval_results"] != DEMO["demo/eval_results"]
