"""The leaderboard read from a store written as steps write it: runs, evaluations, their failures."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from marin_pipelines.evals import leaderboard as lb
from marin_pipelines.store import RECORDS, ArtifactStore

TASKS = lb.AVERAGE_TASKS
METRIC = {
    "marin_python_mc": "acc",
    "marin_python_cloze": "acc",
    "marin_python_qa": "exact_match",
    "marin_python_doc": "f1",
}


_REAL_GMTIME = time.gmtime


def run(
    store: ArtifactStore,
    name: str,
    version: str,
    flops: float = 1e12,
    *,
    base: str | None = None,
    partition: str | None = None,
) -> str:
    """A finished training run, as the checkpoint stage leaves it: its key."""
    with store.write(name.split("/"), version, partition) as out:
        summary = {
            "params": 1000,
            "active_params": 1000,
            "non_embedding_params": 100,
            "tokens_seen": 5000,
            "flops": flops,
        }
        (out.path / "train.json").write_text(json.dumps({"config": {}, "summary": summary}))
        (out.path / "model.json").write_text("{}")
        if base:
            (out.path / "inputs.json").write_text(json.dumps({"base": {"from": f"{store.root}/{base}"}}))
            (out.path / "sft_launch.json").write_text("{}")
    return f"{name}/{partition.replace('|', ',') if partition else '_'}/{version}"


def lm_eval_results(scores: dict[str, float], *, version: float = 1.0, limit: bool = False) -> dict[str, Any]:
    return {
        "results": {t: {f"{METRIC[t]},none": v, "sample_len": 10} for t, v in scores.items()},
        "versions": {t: version for t in scores},
        "n-shot": {t: 0 for t in scores},
        "n-samples": {t: {"original": 10, "effective": 5 if limit else 10} for t in scores},
        "higher_is_better": {t: {METRIC[t]: True} for t in scores},
    }


def evaluation(
    store: ArtifactStore,
    name: str,
    version: str,
    checkpoint: str,
    results: dict[str, Any] | None,
    tasks: list[str],
    bpb: dict[str, float] | None = None,
) -> None:
    """An evaluation of the run at ``checkpoint`` (its key); ``results`` None: one that failed and left
    its work folder."""
    launch = {
        "checkpoint": f"{store.root}/{checkpoint}",
        "bpb": {n: [f"{store.root}/data/cache/_/abc"] for n in bpb or {}},
        "evals": {"tasks": tasks, "heldout": {}, "chat": {}, "chat_tasks": False},
    }
    asset, _, ckpt_version = checkpoint.rpartition("/_/")
    if results is None:
        work = Path(store.root, *name.split("/"), "_", f".{version}.work")
        work.mkdir(parents=True)
        (work / "eval_launch.json").write_text(json.dumps(launch))
        return
    results = {**results, "bpb": {n: {"bits_per_byte": v, "loss": v} for n, v in (bpb or {}).items()}}
    with store.write(
        name.split("/"), version, None, upstream={"checkpoint": f"{asset}@{ckpt_version}"}
    ) as out:
        (out.path / "eval_launch.json").write_text(json.dumps(launch))
        (out.path / "results.json").write_text(json.dumps(results))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ArtifactStore:
    seconds = iter(range(1_800_000_000, 1_900_000_000))
    monkeypatch.setattr(time, "gmtime", lambda *_: _REAL_GMTIME(next(seconds)))
    return ArtifactStore(tmp_path / "store")


def cell(board: lb.Leaderboard, model: str, metric: str) -> lb.Score | None:
    return next((s for (k, c), s in board.cells.items() if k == model and c.metric == metric), None)


def test_a_newer_partial_failed_or_other_version_result_never_replaces_a_valid_one(store):
    m = run(store, "exp/checkpoint", "aaa")
    evaluation(store, "exp/eval", "e1", m, lm_eval_results({"marin_python_mc": 0.5}), ["marin_python_mc"])
    evaluation(
        store,
        "exp/eval_limit",
        "e2",
        m,
        lm_eval_results({"marin_python_mc": 0.9}, limit=True),
        ["marin_python_mc"],
    )
    evaluation(
        store,
        "exp/eval_old_task",
        "e3",
        m,
        lm_eval_results({"marin_python_mc": 0.8}, version=0.5),
        ["marin_python_mc"],
    )
    evaluation(store, "exp/eval_empty", "e4", m, lm_eval_results({}), ["marin_python_mc"])  # no number
    evaluation(store, "exp/eval_crashed", "e5", m, None, ["marin_python_mc"])  # left its work folder
    board = lb.leaderboard(store)
    shown = cell(board, m, "marin_python_mc/acc")
    assert (shown.value, shown.status, shown.evaluation) == (0.5, lb.VALID, "exp/eval/_/e1")


def test_without_a_valid_result_a_cell_says_why(store):
    partial, old, failed, crashed = (run(store, f"exp/checkpoint_{i}", "v") for i in range(4))
    evaluation(
        store,
        "exp/e_partial",
        "e1",
        partial,
        lm_eval_results({"marin_python_mc": 0.9}, limit=True),
        ["marin_python_mc"],
    )
    evaluation(
        store,
        "exp/e_old",
        "e2",
        old,
        lm_eval_results({"marin_python_mc": 0.8}, version=0.5),
        ["marin_python_mc"],
    )
    evaluation(store, "exp/e_failed", "e3", failed, lm_eval_results({}), ["marin_python_mc"])
    evaluation(store, "exp/e_crashed", "e4", crashed, None, ["marin_python_mc"])
    board = lb.leaderboard(store)
    said = {k: lb.cell_text(cell(board, k, "marin_python_mc/acc")) for k in (partial, old, failed, crashed)}
    assert said == {
        partial: "0.9 (partial)",
        old: "0.8 (other version v0.5)",
        failed: "failed",
        crashed: "failed",
    }
    assert lb.as_json(board)["rows"][0]["scores"]  # every row carries its cells with their status


def test_the_average_covers_only_models_with_every_task_and_says_which(store):
    full, short = run(store, "exp/checkpoint_full", "v"), run(store, "exp/checkpoint_short", "v")
    evaluation(store, "exp/eval_full", "e1", full, lm_eval_results(dict.fromkeys(TASKS, 0.4)), list(TASKS))
    evaluation(
        store, "exp/eval_short", "e2", short, lm_eval_results(dict.fromkeys(TASKS[:2], 0.9)), list(TASKS[:2])
    )
    board = lb.leaderboard(store)
    assert board.averages == {full: pytest.approx(0.4)}
    assert board.lacking == {short: ["marin_python_qa"]}
    assert [c.metric for c in board.average_of] == [f"{t}/{METRIC[t]}" for t in TASKS]
    assert [m.key for m in board.models] == [full, short]  # ranked by the average, the incomplete last
    assert "for the 1 models that have a valid result of every one; 1 lack one" in lb.markdown(board)


def test_the_default_average_is_over_what_every_experiments_evaluation_asks(store):
    """Every experiment's evaluations run the demo's quick tasks; the SFT experiment's marin_python_doc is not
    among them, so a default average requiring it would leave every other model without one."""
    from marin_pipelines.evals.standard_suite import STANDARD_TASKS
    from marin_pipelines.experiments import demo

    assert set(lb.AVERAGE_TASKS) <= set(demo.EVALS["tasks"]) & set(STANDARD_TASKS)
    m = run(store, "exp/checkpoint", "v")
    evaluation(store, "exp/eval", "e1", m, lm_eval_results(dict.fromkeys(TASKS, 0.5)), list(TASKS))
    assert lb.leaderboard(store).averages == {m: pytest.approx(0.5)}
    chosen = lb.leaderboard(store, average=["marin_python_mc", "marin_python_doc"])  # --average still chooses
    assert chosen.averages == {} and chosen.lacking == {m: ["marin_python_doc"]}


def test_the_average_note_names_every_task_it_requires_and_why_one_has_no_column(store):
    m = run(store, "exp/checkpoint", "v")
    evaluation(store, "exp/eval", "e1", m, lm_eval_results(dict.fromkeys(TASKS, 0.5)), list(TASKS))
    board = lb.leaderboard(store, average=[*TASKS, "marin_python_doc"])
    note = lb.average_note(board)
    assert note.startswith(
        "No average: no model has a valid result of every one of marin_python_mc/acc, "
        "marin_python_cloze/acc, "
        "marin_python_qa/exact_match, marin_python_doc (no column: no model was evaluated on it)."
    )
    assert lb.as_json(board)["average"]["tasks"] == [*TASKS, "marin_python_doc"]


def test_two_experiments_one_version_reused_one_row_with_both_names(store):
    """Runs of two experiments meet in one table; an output reused under another step name (its manifest
    says ``same_as``) is one row with both names, and an evaluation under either name lands in it."""
    a = run(store, "first/checkpoint", "vvv", flops=2e11)
    b = run(store, "second/checkpoint", "www", flops=4e11)
    with store.write(["second", "checkpoint_again"], "vvv") as out:
        out.metadata["x"] = 1
    alias = json.loads(Path(store.root, "second/checkpoint_again/_/vvv/manifest.json").read_text())
    alias["same_as"] = {"asset": "first/checkpoint", "url": f"{store.root}/{a}"}
    Path(store.root, "second/checkpoint_again/_/vvv/manifest.json").write_text(json.dumps(alias))
    for experiment, steps in {
        "first": [("first/checkpoint", "vvv")],
        "second": [("second/checkpoint", "www"), ("second/checkpoint_again", "vvv")],
    }.items():
        store.write_text(
            f"{RECORDS}/{experiment}.json",
            json.dumps({"experiment": experiment, "steps": [{"name": n, "version": v} for n, v in steps]}),
        )
    evaluation(
        store,
        "first/eval",
        "e1",
        a,
        lm_eval_results({"marin_python_mc": 0.3}),
        ["marin_python_mc"],
        bpb={"main": 2.0},
    )
    evaluation(
        store,
        "second/eval",
        "e2",
        b,
        lm_eval_results({"marin_python_mc": 0.6}),
        ["marin_python_mc"],
        bpb={"main": 1.5},
    )
    evaluation(
        store,
        "second/eval_again",
        "e3",
        "second/checkpoint_again/_/vvv",
        lm_eval_results({"marin_python_qa": 0.1}),
        ["marin_python_qa"],
    )
    board = lb.leaderboard(store, sort="bpb [data/cache@abc]")
    rows = {m.key: m for m in board.models}
    assert sorted(rows) == [a, b]
    assert rows[a].names == ["first/checkpoint", "second/checkpoint_again"]
    assert rows[a].experiments == ["first", "second"] and rows[b].experiments == ["second"]
    assert cell(board, a, "marin_python_qa/exact_match").value == 0.1  # asked under the other name
    assert [m.key for m in board.models] == [b, a]  # lower bits per byte first
    table = lb.to_polars(board)
    assert table["model"].to_list() == [b, a] and table["marin_python_mc/acc"].to_list() == [0.6, 0.3]


def test_pareto_front_keeps_what_nothing_cheaper_beats():
    points = [(1.0, 0.2), (2.0, 0.1), (3.0, 0.5), (4.0, 0.4), (5.0, 0.6)]
    assert lb.pareto_front(points, higher_is_better=True) == [(1.0, 0.2), (3.0, 0.5), (5.0, 0.6)]
    assert lb.pareto_front(points, higher_is_better=False) == [(1.0, 0.2), (2.0, 0.1)]


def test_an_unreadable_evaluation_is_skipped_counted_and_named(store):
    m = run(store, "exp/checkpoint", "aaa")
    evaluation(store, "exp/eval", "e1", m, lm_eval_results({"marin_python_mc": 0.5}), ["marin_python_mc"])
    evaluation(
        store, "exp/eval_torn", "e2", m, lm_eval_results({"marin_python_mc": 0.9}), ["marin_python_mc"]
    )
    Path(store.root, "exp/eval_torn/_/e2/results.json").write_text('{"results": ')  # cut short on disk
    board = lb.leaderboard(store)
    assert cell(board, m, "marin_python_mc/acc").value == 0.5  # the readable one still counts
    assert (
        list(board.skipped) == ["exp/eval_torn/_/e2"]
        and "JSONDecodeError" in board.skipped["exp/eval_torn/_/e2"]
    )
    assert "1 evaluations skipped, unreadable (the first: exp/eval_torn/_/e2" in lb.markdown(board)
    assert lb.as_json(board)["skipped"] == board.skipped


def test_the_finished_runs_are_listed_without_reading_any_evaluations_results(store, monkeypatch):
    m = run(store, "exp/checkpoint", "aaa")
    evaluation(store, "exp/eval", "e1", m, lm_eval_results({"marin_python_mc": 0.5}), ["marin_python_mc"])
    read = []
    real = ArtifactStore.read_text
    monkeypatch.setattr(ArtifactStore, "read_text", lambda self, rel: read.append(rel) or real(self, rel))
    assert list(lb.finished_runs(store)) == [m]
    assert not [r for r in read if r.endswith("results.json") or r.startswith("exp/eval")]
    lb.read_store(store)
    assert "exp/eval/_/e1/results.json" in read  # the table does read them


def test_a_run_no_record_declares_belongs_to_the_experiment_its_step_is_named_under(store):
    m = run(store, "zloss_ablation/checkpoint_zloss_0", "aaa")  # no execution record in the store
    evaluation(
        store, "zloss_ablation/eval", "e1", m, lm_eval_results({"marin_python_mc": 0.5}), ["marin_python_mc"]
    )
    board = lb.leaderboard(store)
    [row] = board.models
    assert row.experiments == ["zloss_ablation"] and row.experiment == "zloss_ablation"
    assert "zloss_ablation/checkpoint_zloss_0" in lb.markdown(board, experiment="zloss_ablation")


def test_two_versions_of_one_step_show_their_versions_and_params_say_their_base(store):
    """Trained twice under one name (before the version index), two rows that differ by their version; the
    parameters are labelled with their base (the total with embeddings), the JSON's and parquet's keys too."""
    old, new = run(store, "exp/checkpoint", "0123456789ab"), run(store, "exp/checkpoint", "ba9876543210")
    for i, m in enumerate((old, new)):
        evaluation(
            store, f"exp/eval_{i}", f"e{i}", m, lm_eval_results({"marin_python_mc": 0.5}), ["marin_python_mc"]
        )
    board = lb.leaderboard(store)
    table = lb.markdown(board)
    assert "| rank | model | version | experiment | params (total, active) |" in table
    rows = [line for line in table.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert sorted(row.split(" | ")[2] for row in rows) == ["0123456789ab", "ba9876543210"]
    row = lb.as_json(board)["rows"][0]
    assert (row["version"], row["total_params"], row["total_active_params"], row["non_embedding_params"]) == (
        "0123456789ab",
        1000,
        1000,
        100,
    )
    frame = lb.to_polars(board)
    assert {"version", "total_params", "total_active_params", "non_embedding_params"} <= set(frame.columns)
    assert "params" not in frame.columns and "active_params" not in frame.columns


def test_the_written_leaderboard_table_keeps_one_experiments_rows_when_asked(store):
    a, b = run(store, "first/checkpoint", "v1"), run(store, "second/checkpoint", "v2")
    for i, m in enumerate((a, b)):
        evaluation(
            store, f"x/eval_{i}", f"e{i}", m, lm_eval_results({"marin_python_mc": 0.5}), ["marin_python_mc"]
        )
    every, _ = lb.write_leaderboard(store)
    first, reused = lb.write_leaderboard(store, experiment="first")
    assert not reused and first.version != every.version  # another table, not the unfiltered one again
    shown = first.metadata["markdown"]["leaderboard"]
    assert "first/checkpoint" in shown and "second/checkpoint" not in shown
    assert len(json.loads((first.path / lb.DATA).read_text())["rows"]) == 2  # the data keeps every row


def two_experiments(store: ArtifactStore) -> tuple[str, str]:
    """Two runs of two experiments (by their step names), each scored on the average's tasks."""
    a, b = run(store, "first/checkpoint", "v1", flops=2e11), run(store, "second/checkpoint", "v2", flops=4e11)
    for i, (m, score) in enumerate(((a, 0.3), (b, 0.6))):
        evaluation(
            store, f"x/eval_{i}", f"e{i}", m, lm_eval_results(dict.fromkeys(TASKS, score)), list(TASKS)
        )
    return a, b


def test_the_command_prints_the_table_or_one_json_object_filtered_and_writes_its_files(
    store, tmp_path, capsys
):
    from marin_pipelines.cli import main

    a, b = two_experiments(store)
    assert main(["leaderboard", "--evals", "--store-root", store.root]) == 0
    table = capsys.readouterr().out
    assert "| rank | model | version | experiment |" in table
    assert table.index("second/checkpoint") < table.index("first/checkpoint")  # best average first

    assert main(["leaderboard", "--evals", "--json", "--store-root", store.root]) == 0
    data = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert [r["key"] for r in data["rows"]] == [b, a]
    assert {c["label"] for c in data["columns"]} >= {"marin_python_mc/acc", "marin_python_qa/exact_match"}

    first = ["leaderboard", "--evals", "--json", "--experiment", "first", "--store-root", store.root]
    assert main(first) == 0 and [r["key"] for r in json.loads(capsys.readouterr().out)["rows"]] == [a]

    out = tmp_path / "lb"
    assert main(["leaderboard", "--evals", "--out", str(out), "--store-root", store.root]) == 0
    assert (out / "leaderboard.parquet").is_file() and (out / "leaderboard.png").is_file()


def test_the_plot_is_drawn_and_lands_in_the_leaderboards_metadata(store):
    two_experiments(store)
    artifact, _ = lb.write_leaderboard(store)
    assert list(artifact.metadata["plots"].values()) == [lb.PLOT]
    assert (artifact.path / lb.PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fine_tune_names_its_base_and_counts_its_bases_flops(store):
    base = run(store, "exp/checkpoint", "b", flops=1e12)
    tuned = run(store, "exp/sft_checkpoint", "s", flops=1e10, base=base)
    orphan = run(store, "exp/sft_elsewhere", "o", flops=1e10, base="gone/checkpoint/_/x")
    runs = lb.finished_runs(store)
    assert (runs[tuned].base, runs[tuned].chat) == (base, True)
    assert runs[tuned].total_flops == pytest.approx(1.01e12) and runs[base].total_flops == 1e12
    assert runs[orphan].total_flops is None  # its base's FLOPs unknown: not its own alone
    evaluation(store, "exp/eval", "e1", tuned, lm_eval_results({"marin_python_mc": 0.5}), ["marin_python_mc"])
    assert "exp/sft_checkpoint (from exp/checkpoint)" in lb.markdown(lb.leaderboard(store))
