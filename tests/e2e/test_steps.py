"""Steps and experiments that compose: shared steps are reused, conflicts are clear errors, experiments
are found by themselves, comparisons hold every variant, records and dry-runs tell what is done."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import small_ablation
from dagster import DagsterInstance

from marin_pipelines.cli import main
from marin_pipelines.defs.experiments_component import experiment_definitions
from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.execution_record import record_name
from marin_pipelines.experiment import Experiment, ExperimentError, discover_experiments
from marin_pipelines.experiments.defaults import (
    crawl_and_text,
    quality_and_curation,
    tokenizer_and_cache,
    train,
)
from marin_pipelines.steps import StepError, changed_fields, unique_steps
from marin_pipelines.store import ArtifactStore

SMALL_CRAWL = {"pydoc_modules": ["json", "heapq", "bisect", "textwrap", "shlex"], "n_files": 2}
TRAIN, MODEL = small_ablation.TRAIN, small_ablation.MODEL


def small_tokens(prefix: str = "small"):
    text = crawl_and_text(prefix, demo=SMALL_CRAWL)
    quality = quality_and_curation(prefix, text.deduplicated_text, quality={"bucket": 10_000, "epoch": 5})
    return tokenizer_and_cache(prefix, quality.curated_text, tokenizer={"vocab_size": 512})


def test_one_name_two_configs_is_an_error_naming_both_places():
    first = small_tokens()
    second = tokenizer_and_cache("small", first.cache.inputs["curated_text"], tokenizer={"vocab_size": 1024})
    with pytest.raises(StepError) as error:
        Experiment("clash", steps=[first.cache, second.cache])
    message = str(error.value)
    assert "'small/tokenizer'" in message and message.count("tests/e2e/test_steps.py:") == 2
    assert "vocab_size" in message  # which field forked


def test_the_same_step_declared_twice_identically_is_one_step():
    a, b = small_tokens(), small_tokens()
    assert a.cache is not b.cache and a.cache.version == b.cache.version
    assert len(unique_steps([*a.cache.upstream(), *b.cache.upstream()])) == len(a.cache.upstream())


def test_a_bad_field_names_the_step_the_place_and_the_field():
    with pytest.raises(StepError) as error:
        train("small/run", small_tokens(), model={"size": "huge"})
    assert "small/run" in str(error.value) and "model.size" in str(error.value)
    assert "tests/e2e/test_steps.py:" in str(error.value)


def test_changed_fields_say_why_a_hash_forked():
    assert changed_fields({"train": {"lr": 1, "steps": 2}}, {"train": {"lr": 2, "steps": 2}}) == ["train.lr"]


def test_the_prediction_is_an_ordering_edge_that_versions_nothing():
    from marin_pipelines.experiments import demo

    assert demo.target.checkpoint.after == (demo.target.prediction,)
    assert "isoflop_forecast" not in demo.target.checkpoint.inputs
    assert demo.target.prediction not in demo.target.checkpoint.inputs.values()
    # the forecast and the target read every cache the rungs train on (the crawl's and the packages')
    rungs = demo.ladder.checkpoints.inputs
    assert len(rungs) == 2 and demo.target.checkpoint.inputs == rungs
    assert demo.target.prediction.inputs == {"ladder_eval_results": demo.ladder.evaluations, **rungs}


EXPERIMENT_FILE = """
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import evaluate, variant

longer = variant(demo.target.checkpoint, "mine/longer", train={{"seed": 7}})
mine = Experiment("mine", steps=[evaluate("mine/eval", longer{extra})])
"""


def test_a_new_experiment_module_appears_with_no_other_edit(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(EXPERIMENT_FILE.format(extra=""))
    monkeypatch.setenv("MARIN_EXPERIMENTS_PATH", str(tmp_path))
    found = discover_experiments()
    assert "mine" in found and {"demo", "zloss_ablation", "quality_ablation", "datashop"} <= set(found)
    from marin_pipelines.definitions import defs

    keys = {key.to_user_string() for key in defs().resolve_asset_graph().get_all_asset_keys()}
    assert {"mine/longer", "mine/eval", "demo/checkpoint"} <= keys
    assert sum(key == "demo/tokenized_cache" for key in keys) == 1  # a shared step is one asset
    assert main(["experiments"]) == 0


def test_a_broken_experiment_file_names_the_file_and_the_field(tmp_path, capsys):
    (tmp_path / "mine.py").write_text(EXPERIMENT_FILE.format(extra=', evals={"tasks": "mc", "nope": 1}'))
    with pytest.raises(ExperimentError) as error:
        discover_experiments([str(tmp_path)])
    assert str(tmp_path / "mine.py") in str(error.value) and "evals.nope" in str(error.value)
    (tmp_path / "mine.py").write_text("import nowhere_to_be_found\n")
    with pytest.raises(ExperimentError, match=r"mine\.py: line 1: ModuleNotFoundError"):
        discover_experiments([str(tmp_path)])


def test_definitions_tag_each_asset_with_the_experiments_that_use_it():
    from dagster import AssetKey, Definitions

    from marin_pipelines.resources import default_resources

    found = discover_experiments()
    defs = Definitions.merge(
        experiment_definitions(list(found.values())), Definitions(resources=default_resources())
    )
    graph = defs.resolve_asset_graph()

    tags = graph.get(AssetKey(["demo", "tokenized_cache"])).tags
    assert {"marin/experiment.demo", "marin/experiment.zloss_ablation"} <= set(tags)
    assert "marin/experiment.datashop" not in tags  # datashop tokenizes its own curated text
    specs = {
        (spec.asset_key.to_user_string(), spec.name): spec
        for assets in defs.assets
        for spec in assets.check_specs
    }
    assert specs[("demo/web_documents", "funnel")].blocking
    assert specs[("demo/checkpoint", "loss_finite_and_falling")].blocking
    assert not specs[("demo/isoflop_law", "actual_in_preregistered_interval")].blocking  # a finding: warns
    target = graph.get(AssetKey(["demo", "checkpoint"]))
    assert AssetKey(["demo", "isoflop_forecast"]) in target.parent_keys  # the order is in the graph
    assert target.automation_condition is not None  # rolls forward once the ladder is done


SECRETS = {"WANDB_API_KEY": "wandb-secret-5f1c2a", "MARIN_ANNOTATOR_API_KEY": "annotator-secret-9d3e7b"}


@pytest.fixture(scope="module")
def ablation(tiny_store, tmp_path_factory):
    """A baseline experiment over the tiny pipeline's data (built already), then an ablation over its
    steps (tests/small_ablation.py), materialised as the command line does in the instance of a
    ``DAGSTER_HOME``, with keys in the environment that nothing may write down."""
    root = tiny_store
    home = tmp_path_factory.mktemp("dagster_home")
    mp = pytest.MonkeyPatch()
    for name, value in {**SECRETS, "DAGSTER_HOME": str(home)}.items():
        mp.setenv(name, value)
    instance = DagsterInstance.get()  # sqlite under DAGSTER_HOME: what the webserver reads
    first = materialize_experiment(small_ablation.baseline, root, instance)
    second = materialize_experiment(small_ablation.ablation, root, instance, others=[small_ablation.baseline])
    mp.undo()
    instance.dispose()
    return root, small_ablation.baseline, small_ablation.ablation, first, second, home


def test_a_second_experiment_recomputes_none_of_the_shared_steps(ablation):
    _, baseline, experiment, first, second, _ = ablation
    assert {m.asset for m in first.materialized if not m.reused} == {"small/run", "small/eval"}
    assert first.checks_passed
    shared = {step.name for step in baseline.all_steps}
    reused = {m.asset for m in second.materialized if m.reused}
    computed = {m.asset for m in second.materialized if not m.reused}
    assert reused == shared  # every one of the baseline's steps, none recomputed
    assert computed == {"small_ablation/run_hot", "small_ablation/eval_hot", "small_ablation/comparison"}


def test_the_comparison_holds_every_variant(ablation):
    root, _, experiment, _, second, _ = ablation
    comparison = experiment.step("small_ablation/comparison")
    artifact = ArtifactStore(root).get(comparison.key, comparison.version)
    meta = artifact.metadata
    assert meta["metric"] == "own-data validation loss" and meta["best"] in ("base", "hot")
    head, losses = meta["markdown"]["verdict"].split("\n\n")  # no claims declared: nothing to check
    assert head.startswith("**Cannot tell whether the hypothesis held**") and meta["held"] == "cannot tell"
    assert losses.splitlines()[1].startswith("- hot against base: ")
    assert "hotter learning rate" in meta["markdown"]["hypothesis"]
    assert "| metric | base | hot |" in meta["markdown"]["comparison"]
    for plot in ("loss_curves.png", "loss_vs_baseline.png", "scores.png"):
        assert (artifact.path / plot).stat().st_size > 1000
    # the UI shows the answer first: the verdict, the hypothesis and the table, the plots, then the rest
    shown = next(m.metadata for m in second.materialized if m.asset == "small_ablation/comparison")
    plots = ["loss_vs_baseline", "loss_curves", "scores"]
    assert list(shown)[:8] == ["verdict", "hypothesis", "comparison", *plots, "best", "metric"]
    assert list(shown)[-6:] == ["path", "version", "reused", "files", "bytes", "wall_seconds"]


def test_the_execution_record_lists_every_step_and_the_runs(ablation, monkeypatch):
    root, _, experiment, first, second, _ = ablation
    record = json.loads(ArtifactStore(root).read_text(record_name(experiment)))
    assert [s["name"] for s in record["steps"]] == [s.name for s in experiment.all_steps]
    assert all(s["status"] == "done" for s in record["steps"])
    # the runs that made the outputs: the baseline's made the shared steps, the ablation's the rest
    assert set(record["dagster_run_ids"]) & set(second.run_ids) and set(record["dagster_run_ids"]) & set(
        first.run_ids
    )
    assert record["git"] is None or len(record["git"]["commit"]) == 40
    by_name = {s["name"]: s for s in record["steps"]}
    assert by_name["small_ablation/run_hot"]["config"]["train"]["learning_rate"] == 1e-2


def test_no_secret_is_written_into_records_manifests_or_outputs(ablation):
    files = [p for p in Path(ablation[0]).rglob("*") if p.is_file()]
    assert {"small.json", "small_ablation.json"} <= {p.name for p in files if p.parent.name == "_experiments"}
    for path in files:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # the shared store: another worker's run released a lease meanwhile
            continue
        for value in SECRETS.values():
            assert value.encode() not in data, path


def test_dry_run_says_what_is_done_and_why_a_hash_forked(ablation, capsys, tmp_path, monkeypatch):
    root, _, experiment, _, _, _ = ablation
    (tmp_path / "forked.py").write_text(
        textwrap.dedent(
            """
            import sys
            sys.path.insert(0, {tests!r})
            from tiny_pipeline import tiny_tokens
            from marin_pipelines.experiment import Experiment
            from marin_pipelines.experiments.defaults import evaluate, train

            tokens = tiny_tokens()
            run = train("small/run", tokens, model={model}, train={{**{train}, "seed": 3}})
            forked = Experiment("forked", steps=[evaluate("small/eval", run, batch_size=8)])
            """
        ).format(tests=str(Path(__file__).parents[1]), model=MODEL, train=TRAIN)
    )
    monkeypatch.setenv("MARIN_EXPERIMENTS_PATH", str(tmp_path))
    assert main(["experiment", "forked", "--dry-run", "--store-root", root]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["experiment"] == "forked" and out["record"].endswith("forked.json")
    steps = {s["name"]: s for s in out["steps"]}
    assert steps["tiny/tokenized_cache"]["status"] == "done"  # made by another experiment: still done
    assert steps["small/run"]["status"] == "to_run"
    assert steps["small/run"]["changed"]["config"] == ["train.seed"]
    assert steps["small/eval"]["changed"]["inputs"] == ["checkpoint"]
    assert all(s["output"].startswith(root) for s in out["steps"])


def test_outputs_made_elsewhere_show_as_materialised_in_this_instance_once(ablation):
    """Another instance (the UI's, say) finds every step done in the store: it starts no run, and each
    asset is reported to it once at its version, so that the UI shows none as never materialised."""
    root, baseline, _, _, _, _ = ablation
    from dagster import AssetKey, DagsterEventType, EventRecordsFilter

    elsewhere = DagsterInstance.ephemeral()
    run = materialize_experiment(baseline, root, elsewhere)
    assert run.run_ids == [] and {m.asset for m in run.materialized if not m.reused} == set()

    def events() -> list:
        return elsewhere.get_event_records(EventRecordsFilter(DagsterEventType.ASSET_MATERIALIZATION))

    recorded = {record.event_log_entry.dagster_event.asset_key for record in events()}
    assert recorded == {AssetKey(step.name.split("/")) for step in baseline.all_steps}
    assert all(record.asset_materialization.metadata["reused"].value for record in events())
    materialize_experiment(baseline, root, elsewhere)  # known at these versions now: nothing reported again
    assert len(events()) == len(recorded)


def test_the_ui_shows_the_runs_assets_verdict_and_ladder_grid(ablation):
    """The webserver, started on 127.0.0.1 over the instance the ablation ran in, serves through its GraphQL
    API what a user looks for: the runs tagged with the experiment, under its job; every asset
    materialised; the comparison headed by its verdict; a ladder's partitions as a budget x size grid."""
    *_, home = ablation
    bench = Path(__file__).parents[2] / "bench"
    sys.path.insert(0, str(bench))
    try:
        from ui_check import webserver, what_the_ui_shows
    finally:
        sys.path.remove(str(bench))
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": tests}
    with webserver(["-f", str(Path(tests) / "small_ablation.py")], env) as url:
        shown = what_the_ui_shows(url, small_ablation.ablation)
        ladder = what_the_ui_shows(url, small_ablation.ladder)
    assert {r["jobName"] for r in shown.runs} == {"small_ablation_pipeline"}
    assert all(r["status"] == "SUCCESS" for r in shown.runs)
    assert shown.never_materialised == []  # the baseline's steps too, materialised by the other run
    labels = shown.first_entries["small_ablation/comparison"]
    assert labels[:6] == ["verdict", "hypothesis", "comparison", "loss_vs_baseline", "loss_curves", "scores"]
    grid = ladder.dimensions["small_ladder/isoflop_checkpoint"]
    assert grid == {"budget": ["1e10", "2e10", "4e10"], "size": ["size1", "size2", "size3"]}
