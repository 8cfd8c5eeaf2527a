"""The whole step graph, materialised in process on a tiny crawl: the same path `make demo` takes.

Its IsoFLOP ladder is the tests' one ladder trained through Dagster and the launcher: 9 rungs on a mixture
of the crawl's text and a second source from another step (installed packages' text), each evaluated on
both and on a held-out set, the forecast written before the target starts (with the held-out set's
bits-per-byte forecast through the loss), the target, and the law checking the one against the other."""

import json
import math
import sys

import polars as pl
import pytest
from dagster import DagsterInstance
from event_order import recorded_before_started
from tiny_ladder import TINY_LADDER
from tiny_pipeline import tiny_tokens

from marin_pipelines.cli import main
from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import SKIPPED_MODULES, Experiment
from marin_pipelines.experiments.defaults import (
    forecast_target,
    isoflop_ladder,
    package_text,
    speedrun,
    tokenizer_and_cache,
)
from marin_pipelines.scaling.isoflop_ladder import target_run
from marin_pipelines.stages.scaling import started_at
from marin_pipelines.store import ArtifactStore
from marin_pipelines.tokenize.tokenized_cache import TokenCache

LADDER = {**TINY_LADDER, "target_budget": 1e11}
EVALS = {"tasks": ["marin_python_mc", "marin_python_qa"]}

tokens = tiny_tokens()  # the tiny pipeline's data steps: the session's tiny store holds them already
DATA = {step.name for step in tokens.cache.upstream()}


def packages(name: str, distributions: tuple[str, ...], fraction: float):
    """Small pure-Python packages' text, tokenized with the crawl's tokenizer."""
    text = package_text(f"tiny/{name}_text", distributions=distributions, include_stdlib=False)
    return tokenizer_and_cache(
        f"tiny/{name}", text, tokenizer=tokens.tokenizer, cache={"validation_fraction": fraction}
    )


extra = packages("extra", ("packaging", "pluggy"), 0.1)  # a second source of every training batch
held = packages("held", ("attrs",), 0.5)  # no run trains on it: its bits-per-byte is forecast downstream
MIXTURE = {"sources": {"main": {"weight": 3.0}, "extra": {"weight": 1.0, "cache": extra}}}
ladder = isoflop_ladder(
    "tiny",
    tokens,
    ladder=LADDER,
    train={"log_every": 50},
    data_mixture=MIXTURE,
    also={"held": held.cache},  # bits-per-byte only: lm-eval's tasks cost a rung's evaluation 6 s of its 10
    batch_size=8,
)
# the target is the recipe's run at 2.5x the ladder's largest budget, scored on the tasks too
target = forecast_target(
    "tiny", ladder, downstream=["bpb/held"], evals=EVALS, also={"held": held.cache}, batch_size=8
)
RUNGS = ladder.checkpoints.partition_keys()


def tiny_experiment(submissions: list[str] = (), name: str = "tiny") -> Experiment:
    board = speedrun("tiny/speedrun_leaderboard", tokens, list(submissions), eval_batch_size=8)
    return Experiment(name, steps=[target.scaling_law, board])


def expected_outputs(experiment: Experiment) -> set[tuple[str, str | None]]:
    """(asset, partition) of every step: the demo crawl's one snapshot, the ladder's rungs."""
    partitions = {"snapshot": ["demo"], "ladder": RUNGS, None: [None]}
    return {(s.name, p) for s in experiment.all_steps for p in partitions[s.partitioning]}


@pytest.fixture(scope="module")
def graph(tiny_store):
    """One materialisation of everything, shared by the tests below, over the tiny store's data steps."""
    root = tiny_store
    experiment = tiny_experiment()
    instance = DagsterInstance.ephemeral()
    return experiment, root, instance, materialize_experiment(experiment, root, instance)


def test_every_asset_is_materialised_and_every_check_passes(graph):
    experiment, root, _, run = graph
    # crawl to dedup, quality, tokens, two package texts and their caches, ladder, target, law, speedrun
    assert len(experiment.all_steps) == 20
    outputs = expected_outputs(experiment)
    assert len(RUNGS) == 9 and len(outputs) == len(experiment.all_steps) - 2 + 2 * len(RUNGS)
    assert len(run.materialized) == len(outputs)
    assert {(m.asset, m.partition) for m in run.materialized} == outputs
    assert {m.asset for m in run.materialized if m.reused} == DATA  # the ladder and what follows: computed
    assert len(DATA) == 9 and run.reused == len(DATA)  # the crawl's one snapshot: once each
    assert run.checks and run.checks_passed, run.failed_checks
    # the WARN checks report on the ladder and on the preregistered forecast; the rest block
    assert sorted(c.check for c in run.checks if not c.blocking) == [
        "actual_in_preregistered_interval",
        "ladder_informative",
        "within_accuracy_goal",
    ]
    assert {c.asset for c in run.checks if not c.blocking} == {"tiny/isoflop_forecast", "tiny/isoflop_law"}
    checked = {c.asset for c in run.checks}
    documents = {step.name for step in experiment.all_steps if step.stage.documents}
    assert {"tiny/web_documents", "tiny/deduplicated_text", "tiny/curated_text"} <= documents
    assert documents <= checked  # every document stage's funnel, checked
    assert {"tiny/checkpoint", "tiny/isoflop_checkpoint", "tiny/eval_results"} <= checked
    store = ArtifactStore(root)
    steps = {step.name: step for step in experiment.all_steps}
    for asset, partition in outputs:
        step = steps[asset]
        artifact = store.get(step.key, step.version, partition)
        assert artifact is not None, (asset, partition)
        # under the step's name, not the experiment's: {root}/{step name}/{partition}/{version}
        where = artifact.path.relative_to(store.root).parts
        assert where[:-2] == tuple(step.key) and where[-1] == step.version, (asset, where)
        assert where[-2] == (partition.replace("|", ",") if partition else "_")


def test_each_run_is_named_and_tagged_for_what_it_did(graph):
    """The runs list under the jobs the UI launches (a rung under the ladder's job, what follows the ladder
    under the experiment's), each tagged with the experiment; a rung is its run's partition."""
    experiment, _, instance, run = graph
    runs = [instance.get_run_by_id(run_id) for run_id in run.run_ids]
    assert all(r.tags["marin/experiment"] == "tiny" for r in runs)
    rungs = [r for r in runs if r.job_name == "tiny_isoflop_checkpoint_runs"]
    assert sorted(r.tags["dagster/partition"] for r in rungs) == sorted(RUNGS)
    assert all(r.tags["marin/ladder"] == "tiny/isoflop_checkpoint" for r in rungs)
    others = {r.job_name for r in runs} - {"tiny_isoflop_checkpoint_runs"}
    assert others == {"tiny_pipeline", "tiny_after_ladders"}  # the data steps were the tiny store's already


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
    # the training mixture's bits-per-byte combines its two sources' (the held-out set is apart)
    sources = sorted([scores["bpb/main"], scores["bpb/extra"]])
    assert sources[0] <= meta["tiny/eval_results"]["bits_per_byte"] <= sources[1]
    assert scores["bpb/held"] > 0
    law, forecast = meta["tiny/isoflop_law"], meta["tiny/isoflop_forecast"]
    assert forecast["n_runs"] == len(RUNGS) and forecast["n_budgets"] == 3
    assert "data:image/png;base64," in ckpt["loss_curve"] and "data:image/png;base64," in law["frontier"]
    # the target run is the one forecast: the recipe's run at the target budget, by its own rule
    planned = target_run(ladder.config.target())
    assert forecast["target"]["shape"] == planned.size and forecast["target"]["budget"] == 1e11
    assert ckpt["steps"] == planned.train.steps and ckpt["tokens_seen"] == planned.tokens
    result = law["result"]
    # the UI's numbers are to 4 significant digits, the JSON's whole
    assert result["predicted"] == pytest.approx(forecast["predicted_loss"], rel=1e-3)
    assert result["preregistered"]
    assert result["actual"] == pytest.approx(meta["tiny/eval_results"]["loss"], rel=1e-3)
    # the ladder's diagnostics, against each rung's own evaluation
    assert forecast["unigram_loss"] < math.log(512) and forecast["target_epochs"] > 0
    rungs = {
        m.partition: m.metadata["loss"] for m in run.materialized if m.asset == "tiny/ladder_eval_results"
    }
    stuck = {rung for rung, loss in rungs.items() if loss >= forecast["unigram_loss"]}
    assert sorted(rungs) == sorted(RUNGS) and set(forecast["rungs_not_beating_unigram"]) == stuck
    assert meta["tiny/speedrun_leaderboard"]["runs"] == 0  # the tiny experiment chooses no submissions


def test_the_prediction_is_recorded_before_the_target_run_starts(graph):
    """In a fresh instance, materialising everything: the order comes from the graph's edge."""
    _, root, instance, run = graph
    assert recorded_before_started(instance, run.run_ids, target.prediction, target.checkpoint)
    store = ArtifactStore(root)
    prediction, checkpoint = (store.get(s.key, s.version) for s in (target.prediction, target.checkpoint))
    assert prediction.manifest["created"] <= checkpoint.manifest["created"]


def test_the_forecast_rests_on_the_ladder_and_is_checked_against_the_target(graph):
    _, root, _, run = graph
    store = ArtifactStore(root)
    prediction, checkpoint, law = (
        store.get(s.key, s.version) for s in (target.prediction, target.checkpoint, target.scaling_law)
    )
    record = json.loads(prediction.file("forecast.json").read_text())
    cache = store.get(tokens.cache.key, tokens.cache.version)
    assert record["cache"] == TokenCache(cache.url).identity  # the data it rests on
    assert record["target"]["budget"] == 1e11 and len(record["runs"]) == len(RUNGS)
    low, high = record["prediction"]["low"], record["prediction"]["high"]
    assert low <= record["prediction"]["loss"] <= high
    result = law.metadata["result"]
    assert result["error"] == pytest.approx((result["predicted"] - result["actual"]) / result["actual"])
    assert result["extrapolation"] == pytest.approx(2.5)
    assert result["preregistered_at"] == record["preregistered_at"]  # the law reports when it was written
    assert result["target_started_at"] == started_at(checkpoint.manifest).isoformat()
    # the diagnostics: a unigram model pooled over both sources' tokens; 3 budgets fit no floor, so the
    # forecast is a bound and the check warns, without blocking
    assert prediction.metadata["target_epochs"] > 0 and prediction.metadata["unigram_loss"] < math.log(512)
    warnings = record["diagnostics"]["warnings"]
    floor = "the frontier's floor is not identified (with 3 budgets E is held at 0)"
    assert any(w.startswith(floor) for w in warnings) and record["forecast"]["warnings"][0].startswith(floor)
    informative = [c for c in run.checks if c.check == "ladder_informative"]
    assert [(c.asset, c.passed, c.blocking) for c in informative] == [("tiny/isoflop_forecast", False, False)]
    held_error = law.metadata["downstream"]["bpb/held"]
    assert held_error["relative_error"] == pytest.approx(held_error["predicted"] / held_error["actual"] - 1)
    for name in ("isoflop_curves.png", "frontier.png", "seed_spread.png", "downstream_bpb_held.png"):
        assert law.file(name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_rung_is_one_row_of_the_table_and_the_package_text_funnel_is_conserved(graph):
    _, root, _, _ = graph
    store = ArtifactStore(root)
    prediction = store.get(target.prediction.key, target.prediction.version)
    table = pl.read_parquet(prediction.file("rungs.parquet"))
    assert table.height == len(RUNGS)
    assert table.columns[:7] == ["budget", "size", "seed", "params", "tokens", "flops", "loss"]
    rungs = [ladder.checkpoints.config.ladder.rung(key).run for key in RUNGS]
    assert sorted(table.select("budget", "size", "seed").rows()) == sorted(
        (r.budget, r.size, 0) for r in rungs
    )
    assert (table["flops"] / table["budget"]).is_between(0.8, 1.25).all()  # each rung spends its budget
    assert table["bpb/held"].is_not_null().all() and table["bpb/extra"].is_not_null().all()
    for text in (extra.cache.inputs["curated_text"], held.cache.inputs["curated_text"]):
        corpus = store.get(text.key, text.version)
        funnel = corpus.metadata["funnel"]
        assert funnel["docs_in"] == funnel["docs_out"] + sum(funnel["removed"].values())
        assert funnel["docs_out"] > 5 and len(corpus.metadata["corpus_version"]) == 64


def test_second_run_recomputes_nothing(graph):
    experiment, root, instance, first = graph
    again = materialize_experiment(experiment, root, instance)
    assert len(again.materialized) == len(first.materialized)
    assert again.reused == len(again.materialized)
    assert again.checks_passed and {(c.check, c.passed) for c in again.checks} == {
        (c.check, c.passed) for c in first.checks
    }


@pytest.fixture
def fresh_experiments(monkeypatch):
    """The experiment modules imported anew by the command (they read MARIN_WARC_ROOT when imported), and
    the process's environment and experiment modules as they were afterwards."""
    import marin_pipelines.experiments as package

    monkeypatch.setenv("MARIN_WARC_ROOT", "")  # restored after the test, though the command sets it
    prefix = f"{package.__name__}."

    def experiment_modules() -> dict[str, str]:
        names = [n for n in sys.modules if n.startswith(prefix)]
        return {n: n[len(prefix) :] for n in names if n[len(prefix) :].split(".")[0] not in SKIPPED_MODULES}

    def forget() -> None:
        for name, short in experiment_modules().items():
            del sys.modules[name]
            if "." not in short and hasattr(package, short):
                delattr(package, short)

    saved = {name: sys.modules[name] for name in experiment_modules()}
    forget()
    yield
    forget()
    sys.modules.update(saved)
    for name, module in saved.items():
        if "." not in name[len(prefix) :]:
            setattr(package, name[len(prefix) :], module)


def test_missing_crawl_folder_is_a_clear_error(fresh_experiments, tmp_path, capsys):
    assert main(["demo", "--warc-root", str(tmp_path / "nowhere"), "--store-root", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "nowhere" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["demo", "datashop"])
def test_demo_command_materialises_the_chosen_experiment(name, tmp_path, capsys, monkeypatch):
    import marin_pipelines.defs.local_run

    def stop(experiment, *args, **kwargs):
        raise RuntimeError(f"asked to materialise {experiment.name}")

    monkeypatch.setattr(marin_pipelines.defs.local_run, "materialize_experiment", stop)
    assert main(["demo", "--experiment", name, "--store-root", str(tmp_path)]) == 1
    assert f"asked to materialise {name}" in capsys.readouterr().err


def test_demo_command_runs_the_demo_and_its_ablation_by_default(tmp_path, capsys, monkeypatch):
    import marin_pipelines.defs.local_run

    asked = []

    def stop(experiment, *args, **kwargs):
        asked.append(experiment.name)
        raise RuntimeError(f"asked to materialise {experiment.name}")

    monkeypatch.setattr(marin_pipelines.defs.local_run, "materialize_experiment", stop)
    assert main(["demo", "--store-root", str(tmp_path)]) == 1
    assert asked == ["demo"]  # the first failure stops the command
    assert "asked to materialise demo" in capsys.readouterr().err
    from marin_pipelines.cli.demo import DEMO

    assert DEMO == ("demo", "zloss_ablation", "sft_demo")


def test_empty_crawl_folder_is_a_clear_error(fresh_experiments, tmp_path, capsys):
    (tmp_path / "crawl").mkdir()
    assert main(["demo", "--warc-root", str(tmp_path / "crawl"), "--store-root", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "crawl" in err and "WARC" in err.upper() and "Traceback" not in err
    assert not list((tmp_path / "demo").rglob("manifest.json"))  # nothing half-written survives


def test_definitions_load_for_the_ui():
    from marin_pipelines.definitions import defs
    from marin_pipelines.experiments.demo import demo

    loaded = defs()
    keys = {key.to_user_string() for key in loaded.resolve_asset_graph().get_all_asset_keys()}
    assert {key for key in keys if key.startswith("demo/")} == {step.name for step in demo.all_steps}
    assert {job.name for job in loaded.jobs} >= {
        "demo_crawl_snapshot",
        "demo_isoflop_checkpoint_runs",
        "demo_pipeline",
        "zloss_ablation_pipeline",
    }
    assert "demo_crawl_new_snapshots" in {s.name for s in loaded.sensors}
    assert "demo_refresh" in {s.name for s in loaded.schedules}


def test_the_summary_reads_the_run_back_from_the_store(graph):
    from marin_pipelines.summary import experiment_summary, outcome, wrap_up

    experiment, root, _, run = graph
    text = experiment_summary(experiment, root, run, seconds=1.0)
    end = wrap_up([outcome(experiment, root, run)], [*run.checks, *run.checks])  # each said once
    assert "WARNING" not in text and "ladder warning" not in text  # said once, with its reason, at the end
    forecast = next(m.metadata for m in run.materialized if m.asset == "tiny/isoflop_forecast")
    warned = [line for line in end.splitlines() if line.startswith("WARNING: tiny/isoflop_forecast:")]
    assert len(warned) == bool(forecast["warnings"]) == 1  # 3 budgets: the frontier's floor is not known
    assert warned[0].startswith("WARNING: tiny/isoflop_forecast:ladder_informative: ")
    assert all(line.strip() in warned[0] for warning in forecast["warnings"] for line in warning.splitlines())
    law = next(m.metadata for m in run.materialized if m.asset == "tiny/isoflop_law")
    assert f"actual {law['result']['actual']:.3f}" in text
    result = law["result"]
    tiny = end.splitlines()[1]  # the experiment's figure: its forecast, interval and actual, as its page's
    assert (
        tiny.startswith("tiny (")
        and f"forecast {result['predicted']:.3f}, 95% [{result['low']:.3f}, " in tiny
    )
    assert f"actual {result['actual']:.3f}" in tiny and "**" not in tiny
    assert end.splitlines()[2] == "  http://127.0.0.1:3000/assets/tiny/isoflop_law"
    checks = {c.check: c.passed for c in run.checks}
    outside = not law["result"]["within_interval"]  # what the forecast promised, asked
    assert checks["actual_in_preregistered_interval"] == (not outside)
    assert ("WARNING: tiny/isoflop_law:actual_in_preregistered_interval: forecast " in end) == outside
    assert checks["within_accuracy_goal"] and law["accuracy_goal"] is None  # the tiny ladder declares none
    assert "FAILED" not in text + end
    assert "IsoFLOP ladder: 9 runs, 3 budgets used; frontier L*(C) = " in text
    assert text.count("| 1e+10 |") == text.count("| 2e+10 |") == text.count("| 4e+10 |") == 1
    held_error = law["downstream"]["bpb/held"]
    (low_80, high_80), (low, high) = result["interval_80"], result["interval_95"]
    assert (
        f"loss {result['predicted']:.3f}, 80% [{low_80:.3f}, {high_80:.3f}], 95% [{low:.3f}, {high:.3f}]"
        in text
    )
    # 3 sizes of one seed per budget: each parabola is exact, and the summary says why there is no noise
    assert "(no noise measured: sweep more than 3 sizes, or 2 seeds)" in text
    assert "how far to trust it, said before the run: 95% reaches" in text
    assert (
        f"how it fared: actual {result['actual']:.3f} ({100 * result['error']:+.1f}%), {result['fell']}"
        in text
    )
    assert f"bpb/held: forecast {held_error['predicted']:.3f}, actual {held_error['actual']:.3f}" in text


def test_the_speedrun_trains_and_evaluates_each_run_through_the_launcher(graph):
    experiment, root, instance, _ = graph
    racing = tiny_experiment(["nano_hot"], name="tiny_racing")
    board_step = racing.step("tiny/speedrun_leaderboard")
    assert board_step.version != experiment.step("tiny/speedrun_leaderboard").version
    assert board_step.inputs["tokenized_cache"] is experiment.step("tiny/tokenized_cache")
    run = materialize_experiment(racing, root, instance, through="tiny/speedrun_leaderboard")
    assert {m.asset for m in run.materialized if not m.reused} == {"tiny/speedrun_leaderboard"}
    board = next(m for m in run.materialized if m.asset == "tiny/speedrun_leaderboard")
    assert not board.reused and board.metadata["runs"] == 1 and "nano_hot" in board.metadata["leaderboard"]
    run_dir = ArtifactStore(root).get(board_step.key, board_step.version).path / "runs" / "nano_hot-1e11"
    # the launched children wrote these: the trainer its summary, the evaluator its results JSON
    result = json.loads((run_dir / "results.json").read_text())
    summary = json.loads((run_dir / "train.json").read_text())["summary"]
    evals = json.loads((run_dir / "eval.json").read_text())
    assert result["bits_per_byte"] == evals["bpb"]["validation"]["bits_per_byte"] > 0
    assert result["model_flops"] == summary["flops"] and result["hardware"] == summary["hardware"]
