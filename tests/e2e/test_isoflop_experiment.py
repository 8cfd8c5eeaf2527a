"""An IsoFLOP ladder by a scaling recipe, declared as an experiment and materialised through Dagster and the
launcher: installed packages' text -> tokenizer and caches -> one partition per (budget, shape, seed) ->
the forecast (written before the target starts) -> the target -> the forecast against the actual loss and
a downstream set's bits-per-byte. The plan and the declarations' errors are checked without training."""

import json
import math
from datetime import datetime

import polars as pl
import pytest
from dagster import DagsterInstance
from event_order import recorded_before_started
from pydantic import ValidationError
from tiny_ladder import TINY_LADDER

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    forecast_target,
    isoflop_ladder,
    package_text,
    tokenizer_and_cache,
)
from marin_pipelines.scaling.isoflop_ladder import IsoflopLadderConfig, target_run
from marin_pipelines.stages.scaling import started_at
from marin_pipelines.stages.train import IsoflopRunsConfig, TrainRunConfig, isoflop_partition_keys
from marin_pipelines.steps import InputError, StepError
from marin_pipelines.store import ArtifactStore
from marin_pipelines.tokenize.tokenized_cache import TokenCache

# small pure-Python distributions of the lock: ~1.7 MB of code and documents
DISTRIBUTIONS = ("PyYAML", "tqdm", "idna", "certifi", "requests", "jinja2", "click", "markupsafe")
LADDER = {**TINY_LADDER, "seq_len": 64, "target_budget": 1e11}


def test_the_partitions_are_the_recipes_rungs_with_their_seeds():
    config = IsoflopRunsConfig(ladder=IsoflopLadderConfig(**{**LADDER, "seeds": 2}))
    keys = isoflop_partition_keys(config)
    plan = config.ladder.plan()
    assert keys == [r.key for r in plan.rungs] and len(keys) == len(set(keys))
    assert len(keys) == 2 * len({(r.run.budget, r.run.size) for r in plan.rungs}) >= 2 * 3 * 3
    budget, shape, seed = keys[1].split("|")
    rung = config.ladder.rung(keys[1])
    assert (budget, shape, seed) == ("1e10", rung.run.size, "s1") and rung.run.train.seed == 1
    assert keys == isoflop_partition_keys(config)  # planned from the config alone, the same every load
    with pytest.raises(KeyError, match="no rung '1e10|d999l9|s0'"):
        config.ladder.rung("1e10|d999l9|s0")


def test_the_target_is_the_recipes_run_and_its_vocabulary_holds_the_tokenizers():
    ladder = IsoflopLadderConfig(**LADDER)
    run = TrainRunConfig(model={"seq_len": 64}, target=ladder.target())
    model, train = run.resolve(500)  # a BPE may stop short of the ladder's vocabulary
    assert model == target_run(ladder.target()).model and model.vocab_size == 512
    assert train.steps * train.batch_size * 64 == target_run(ladder.target()).tokens
    with pytest.raises(InputError, match="more than the ladder's vocab_size 512"):
        run.resolve(600)
    # a target is an IsoFLOP ladder's: the older named-size rule's target is gone, and says what it lacks
    lacks = r"target\(\) .*it has no \['recipe', 'seq_len', 'vocab_size'\]"
    with pytest.raises(ValidationError, match=lacks):
        TrainRunConfig(target={"target_budget": 1e12, "batch_size": 16})
    # adding a budget or a seed changes the forecast, not the run forecast
    wider = IsoflopLadderConfig(**{**LADDER, "budgets": [*LADDER["budgets"], 8e10], "seeds": 3})
    assert wider.target() == ladder.target()


def test_a_downstream_set_must_be_evaluated_and_a_target_declared():
    tokens = tokenizer_and_cache("iso_errors", package_text("iso_errors/text", distributions=DISTRIBUTIONS))
    ladder = isoflop_ladder("iso_errors", tokens, ladder=LADDER)
    with pytest.raises(StepError, match="downstream 'bpb/stdlib': no set 'stdlib' is evaluated"):
        forecast_target("iso_errors", ladder, downstream=["bpb/stdlib"])
    untargeted = isoflop_ladder("iso_errors2", tokens, ladder={**LADDER, "target_budget": None})
    with pytest.raises(StepError, match="no target_budget"):
        forecast_target("iso_errors2", untargeted)


@pytest.fixture(scope="module")
def forecast_run(tmp_path_factory):
    """The whole experiment, materialised once: 9 rungs, the forecast, the target, the law."""
    text = package_text("iso/text", distributions=DISTRIBUTIONS, include_stdlib=False)
    held = package_text("iso/held_text", distributions=("attrs",), include_stdlib=False)
    tokens = tokenizer_and_cache(
        "iso", text, tokenizer={"vocab_size": 512}, cache={"validation_fraction": 0.1}
    )
    other = tokenizer_and_cache(
        "iso/held", held, tokenizer=tokens.tokenizer, cache={"validation_fraction": 0.5}
    )
    extra = tokenizer_and_cache(
        "iso/extra",
        package_text("iso/extra_text", distributions=("packaging", "pluggy"), include_stdlib=False),
        tokenizer=tokens.tokenizer,
        cache={"validation_fraction": 0.1},
    )
    # a mixture with a cache from another step: the rungs, the target and the forecast's diagnostics read it
    mixture = {"sources": {"main": {"weight": 3.0}, "extra": {"weight": 1.0, "cache": extra}}}
    ladder = isoflop_ladder(
        "iso",
        tokens,
        ladder=LADDER,
        train={"max_epochs": 10.0},
        data_mixture=mixture,
        also={"held": other.cache},
        batch_size=8,
    )
    target = forecast_target("iso", ladder, downstream=["bpb/held"], also={"held": other.cache}, batch_size=8)
    experiment = Experiment("iso", steps=[target.scaling_law])
    root = str(tmp_path_factory.mktemp("iso-store"))
    instance = DagsterInstance.ephemeral()
    run = materialize_experiment(experiment, root, instance)
    store = ArtifactStore(root)
    return store, ladder, target, text, (experiment, root, run, instance)


def test_the_forecast_is_written_before_the_target_trains_and_checked_after(forecast_run):
    store, ladder, target, _, (_, _, run, instance) = forecast_run
    prediction = store.get(list(target.prediction.key), target.prediction.version)
    checkpoint = store.get(list(target.checkpoint.key), target.checkpoint.version)
    law = store.get(list(target.scaling_law.key), target.scaling_law.version)
    assert prediction is not None and checkpoint is not None and law is not None
    record = json.loads(prediction.file("forecast.json").read_text())
    assert recorded_before_started(instance, run.run_ids, target.prediction, target.checkpoint)
    tokens = ladder.checkpoints.inputs["tokenized_cache"]
    cache = store.get(list(tokens.key), tokens.version)
    assert cache is not None and record["cache"] == TokenCache(cache.url).identity  # the data it rests on
    assert record["target"]["budget"] == 1e11 and len(record["runs"]) == len(
        ladder.checkpoints.partition_keys()
    )
    low, high = record["prediction"]["low"], record["prediction"]["high"]
    assert low <= record["prediction"]["loss"] <= high
    result = law.metadata["result"]
    assert result["predicted"] == record["prediction"]["loss"]
    assert result["actual"] == pytest.approx(checkpoint.metadata["final_loss"], rel=0.2)
    assert result["error"] == pytest.approx((result["predicted"] - result["actual"]) / result["actual"])
    assert result["extrapolation"] == pytest.approx(2.5)
    assert result["preregistered_at"] == record["preregistered_at"]  # the law reports when it was written
    assert datetime.fromisoformat(result["preregistered_at"]) < started_at(checkpoint.manifest)
    assert (
        result["preregistered"] and result["target_started_at"] == started_at(checkpoint.manifest).isoformat()
    )
    # the diagnostics: a unigram model over both sources' tokens, which every rung beats, and little
    # repetition; but 3 budgets fit no floor, so the forecast is a bound and the check warns, without blocking
    unigram = prediction.metadata["unigram_loss"]
    assert 0 < unigram < math.log(512) and prediction.metadata["rungs_not_beating_unigram"] == []
    assert max(r["loss"] for r in record["runs"]) < unigram and 0 < prediction.metadata["target_epochs"] < 10
    (warning,) = record["diagnostics"]["warnings"]
    assert warning.startswith("the frontier's floor is not identified (with 3 budgets E is held at 0)")
    assert record["forecast"]["warnings"] == [warning]
    informative = [c for c in run.checks if c.check == "ladder_informative"]
    assert [(c.asset, c.passed, c.blocking) for c in informative] == [("iso/isoflop_forecast", False, False)]
    held = law.metadata["downstream"]["bpb/held"]
    assert held["relative_error"] == pytest.approx(held["predicted"] / held["actual"] - 1)
    for name in ("isoflop_curves.png", "frontier.png", "seed_spread.png"):
        assert law.file(name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_rung_is_one_row_of_the_table_and_the_text_funnel_is_conserved(forecast_run):
    store, ladder, target, text, _ = forecast_run
    prediction = store.get(list(target.prediction.key), target.prediction.version)
    table = pl.read_parquet(prediction.file("rungs.parquet"))
    keys = ladder.checkpoints.partition_keys()
    assert table.height == len(keys)
    assert table.columns[:7] == ["budget", "size", "seed", "params", "tokens", "flops", "loss"]
    assert sorted(
        f"{b:.3g}|{s}|s{d}".replace("+", "") for b, s, d in table.select("budget", "size", "seed").rows()
    ) == sorted(keys)
    assert (table["flops"] / table["budget"]).is_between(0.8, 1.25).all()  # each rung spends its budget
    assert table["bpb/held"].is_not_null().all()
    corpus = store.get(list(text.key), text.version)
    funnel = corpus.metadata["funnel"]
    assert (
        funnel["docs_in"] == funnel["docs_out"] + sum(funnel["removed"].values()) and funnel["docs_out"] > 40
    )
    assert len(corpus.metadata["corpus_version"]) == 64


def test_the_summary_shows_the_optima_and_the_forecast_against_the_actual(forecast_run):
    from marin_pipelines.summary import experiment_summary

    store, _, target, _, (experiment, root, run, _) = forecast_run
    text = experiment_summary(experiment, root, run, seconds=1.0)
    law = store.get(list(target.scaling_law.key), target.scaling_law.version).metadata
    assert "IsoFLOP ladder: 9 runs, 3 budgets used; frontier L*(C) = " in text
    assert text.count("| 1e+10 |") == text.count("| 2e+10 |") == text.count("| 4e+10 |") == 1
    result, held = law["result"], law["downstream"]["bpb/held"]
    assert f"loss {result['predicted']:.3f} [{result['low']:.3f}, {result['high']:.3f}]" in text
    # 3 sizes of one seed per budget: each parabola is exact, and the summary says why there is no spread
    assert ("(no spread: sweep more than 3 sizes" in text) == (result["low"] == result["high"])
    assert f"actual {result['actual']:.3f} ({100 * result['error']:+.1f}%)" in text
    assert f"bpb/held: forecast {held['predicted']:.3f}, actual {held['actual']:.3f}" in text


def test_a_forecast_written_after_its_target_started_is_no_preregistration():
    from marin_pipelines.summary import forecast_order

    manifest = {"created": "2026-11-24T12:00:10Z", "wall_seconds": 30.5}  # trained 11:59:39.5 to 12:00:10
    start = started_at(manifest)
    assert start.isoformat() == "2026-11-24T11:59:40.500000+00:00"  # the created second's end, less 30.5 s
    assert datetime.fromisoformat("2026-11-24T11:59:39+00:00") < start  # written before: preregistered
    assert not datetime.fromisoformat("2026-11-24T11:59:41+00:00") < start  # a re-forecast, target reused
    after = {"preregistered": False, "target_started_at": start.isoformat()}
    assert (
        forecast_order(after)
        == f"AFTER it started at {start.isoformat()} (a target reused: no preregistration)"
    )
    assert forecast_order({"preregistered": True}) == "before it ran"
    # a run that records its first start (the trainer does, kept across resumes): that start, not the last
    first = "2026-11-24T11:50:00.250000+00:00"
    assert started_at({**manifest, "metadata": {"started_at": first}}).isoformat() == first
