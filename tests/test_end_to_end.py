"""The whole asset graph, materialised in process on a tiny crawl: the same path `make demo` takes."""

import json
import math

import pytest
from dagster import DagsterInstance

from marin_pipelines.cli import main
from marin_pipelines.experiment import STAGES, Experiment
from marin_pipelines.jobs.local import materialize_experiment
from marin_pipelines.store import ArtifactStore

TINY = dict(
    name="tiny",
    crawl={"demo": {"pydoc_modules": ["json", "heapq", "bisect", "textwrap", "shlex"], "n_files": 2}},
    quality={"bucket": 10_000, "epoch": 5},
    curation={"top_fraction": 0.9},
    tokenizer={"vocab_size": 512},
    cache={"validation_fraction": 0.1},
    model={"size": "nano", "seq_len": 32},
    train={"steps": 30, "batch_size": 8, "warmup_steps": 3, "log_every": 5},
    eval_batch_size=8,
    evals={"tasks": ["marin_python_mc", "marin_python_qa"]},
    ladder={"sizes": ["nano", "micro"], "budgets": [3e9, 1e10], "batch_size": 8},
)
LADDER_RUNS = 4


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """One materialisation of everything, shared by the tests below."""
    root = str(tmp_path_factory.mktemp("store"))
    experiment = Experiment.build(**TINY)
    instance = DagsterInstance.ephemeral()
    return experiment, root, instance, materialize_experiment(experiment, root, instance)


def test_every_asset_is_materialised_and_every_check_passes(graph):
    experiment, root, _, run = graph
    unpartitioned = len(STAGES) - 2
    assert len(run.materialized) == unpartitioned + 2 * LADDER_RUNS
    assert run.reused == 0
    assert run.checks and run.checks_passed, run.failed_checks
    # the one WARN check reports on the ladder; a 2 x 2 ladder of a few steps per rung is not informative
    assert [c.check for c in run.checks if not c.blocking] == ["ladder_informative"]
    checked = {c.asset for c in run.checks}
    for stage in ("web_documents", "extracted_text", "filtered_text", "deduplicated_text", "curated_text"):
        assert f"tiny/{stage}" in checked
    store = ArtifactStore(root)
    for stage, version in experiment.versions.items():
        if not stage.startswith("ladder_"):
            partition = "demo" if STAGES[stage].per_snapshot else None  # the demo crawl's one snapshot
            assert store.get(["tiny", stage], version, partition) is not None, stage


def test_stages_do_their_real_job(graph):
    experiment, root, _, run = graph
    meta = {m.asset: m.metadata for m in run.materialized if m.partition in (None, "demo")}
    assert meta["tiny/filtered_text"]["docs_removed"] > 0
    assert meta["tiny/deduplicated_text"]["docs_removed"] > 0  # the planted duplicates
    ckpt = meta["tiny/checkpoint"]
    assert ckpt["final_loss"] < ckpt["initial_loss"] - 0.5
    assert 0 < meta["tiny/eval_results"]["bits_per_byte"] < 10
    scores = meta["tiny/eval_results"]["scores"]
    assert 0 <= scores["marin_python_mc/acc"] <= 1 and 0 <= scores["marin_python_qa/exact_match"] <= 1
    assert scores["bpb/main"] == meta["tiny/eval_results"]["bits_per_byte"]
    law = meta["tiny/scaling_law"]
    assert law["n_runs"] == LADDER_RUNS and len(law["runs"]) == LADDER_RUNS
    assert "data:image/png;base64," in ckpt["loss_curve"] and "data:image/png;base64," in law["scaling_law"]
    prediction = meta["tiny/scaling_prediction"]  # 2 x 2 rungs: too few for 5 parameters, and it says so
    assert prediction["method"] == "log_linear" and "4 runs for 5 parameters" in prediction["method_reason"]
    assert law["main_run"]["predicted_loss"] == prediction["predicted_loss"]
    assert prediction["unigram_loss"] < math.log(512) and prediction["target_epochs"] > 0
    rungs = {r["run"]: r["loss"] for r in prediction["runs"]}
    stuck = {run for run, loss in rungs.items() if loss >= prediction["unigram_loss"]}
    assert set(prediction["rungs_not_beating_unigram"]) == stuck
    assert meta["tiny/speedrun_leaderboard"]["runs"] == 0  # the tiny experiment chooses no submissions


def test_second_run_recomputes_nothing(graph):
    experiment, root, instance, first = graph
    again = materialize_experiment(experiment, root, instance)
    assert len(again.materialized) == len(first.materialized)
    assert again.reused == len(again.materialized)
    assert again.checks_passed and {(c.check, c.passed) for c in again.checks} == {
        (c.check, c.passed) for c in first.checks
    }


def test_missing_crawl_folder_is_a_clear_error(tmp_path, capsys):
    assert main(["demo", "--warc-root", str(tmp_path / "nowhere"), "--store-root", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "nowhere" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["demo", "datashop"])
def test_demo_command_materialises_the_chosen_experiment(name, tmp_path, capsys, monkeypatch):
    import marin_pipelines.jobs.local

    def stop(experiment, *args, **kwargs):
        raise RuntimeError(f"asked to materialise {experiment.name}")

    monkeypatch.setattr(marin_pipelines.jobs.local, "materialize_experiment", stop)
    assert main(["demo", "--experiment", name, "--store-root", str(tmp_path)]) == 1
    assert f"asked to materialise {name}" in capsys.readouterr().err


def test_empty_crawl_folder_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "crawl").mkdir()
    assert main(["demo", "--warc-root", str(tmp_path / "crawl"), "--store-root", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "crawl" in err and "WARC" in err.upper() and "Traceback" not in err
    assert not list((tmp_path / "demo").rglob("manifest.json"))  # nothing half-written survives


def test_definitions_load_for_the_ui():
    from marin_pipelines.definitions import defs

    keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {key for key in keys if key.startswith("demo/")} == {f"demo/{stage}" for stage in STAGES}
    assert {job.name for job in defs.jobs} >= {
        "demo_snapshot",
        "demo_pipeline",
        "demo_ladder",
        "demo_scaling_law",
    }
    assert "demo_new_snapshots" in {s.name for s in defs.sensors}
    assert "demo_refresh" in {s.name for s in defs.schedules}


def test_the_summary_reads_the_run_back_from_the_store(graph):
    from marin_pipelines.summary import experiment_summary

    experiment, root, _, run = graph
    text = experiment_summary(experiment, root, run, seconds=1.0)
    prediction = next(m.metadata for m in run.materialized if m.asset == "tiny/scaling_prediction")
    assert f"a unigram model scores {prediction['unigram_loss']:.3f}" in text
    assert text.count("ladder warning:") == len(prediction["warnings"])
    assert "WARNING: tiny/scaling_prediction:ladder_informative did not pass" in text


def test_the_speedrun_trains_and_evaluates_each_run_through_the_launcher(graph):
    experiment, root, instance, _ = graph
    racing = Experiment.build(**{**TINY, "speedrun": ["nano_hot"]})
    assert racing.versions["tokenized_cache"] == experiment.versions["tokenized_cache"]
    run = materialize_experiment(racing, root, instance, through="speedrun_leaderboard")
    board = next(m for m in run.materialized if m.asset == "tiny/speedrun_leaderboard")
    assert not board.reused and board.metadata["runs"] == 1 and "nano_hot" in board.metadata["leaderboard"]
    key, version = ["tiny", "speedrun_leaderboard"], racing.versions["speedrun_leaderboard"]
    run_dir = ArtifactStore(root).get(key, version).path / "runs" / "nano_hot-1e11"
    # the launched children wrote these: the trainer its summary, the evaluator its results JSON
    result = json.loads((run_dir / "results.json").read_text())
    summary = json.loads((run_dir / "train.json").read_text())["summary"]
    evals = json.loads((run_dir / "eval.json").read_text())
    assert result["bits_per_byte"] == evals["bpb"]["validation"]["bits_per_byte"] > 0
    assert result["model_flops"] == summary["flops"] and result["hardware"] == summary["hardware"]
