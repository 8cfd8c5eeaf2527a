"""An IsoFLOP ladder declared as steps, without training: its partitions, its target, the declarations'
errors, and when a forecast counts as preregistered. The ladder trained and forecast through Dagster:
``tests/e2e/test_end_to_end.py``; through the step runner: ``tests/e2e/scaling/test_forecast.py``."""

from datetime import datetime

import pytest
from pydantic import ValidationError
from tiny_ladder import TINY_LADDER

from marin_pipelines.experiments.defaults import (
    forecast_target,
    isoflop_ladder,
    package_text,
    tokenizer_and_cache,
)
from marin_pipelines.scaling.isoflop_ladder import IsoflopLadderConfig, target_run
from marin_pipelines.stages.scaling import started_at, target_record
from marin_pipelines.stages.train import IsoflopRunsConfig, TrainRunConfig, isoflop_partition_keys
from marin_pipelines.steps import InputError, StepError

LADDER = {**TINY_LADDER, "seq_len": 64, "target_budget": 1e11}


def test_the_partitions_are_the_recipes_rungs_with_their_seeds():
    config = IsoflopRunsConfig(ladder=IsoflopLadderConfig(**{**LADDER, "seeds": 2}))
    keys = isoflop_partition_keys(config)
    plan = config.ladder.plan()
    assert keys == [r.key for r in plan.rungs] and len(keys) == len(set(keys))
    assert len(keys) == 2 * len({(r.run.budget, r.run.size) for r in plan.rungs}) >= 2 * 3 * 3
    assert keys[:4] == ["1e10|size1-seed0", "1e10|size1-seed1", "1e10|size2-seed0", "1e10|size2-seed1"]
    rung = config.ladder.rung(keys[3])
    smallest = config.ladder.rung(keys[0])
    assert rung.run.train.seed == 1 and rung.run.params > smallest.run.params and rung.run.budget == 1e10
    assert rung.label == f"budget 1e10 {rung.run.size} seed 1"
    assert keys == isoflop_partition_keys(config)  # planned from the config alone, the same every load
    one_seed = IsoflopRunsConfig(ladder=IsoflopLadderConfig(**LADDER))
    assert isoflop_partition_keys(one_seed)[:2] == ["1e10|size1", "1e10|size2"]
    with pytest.raises(KeyError, match="no rung '1e10|size99'"):
        config.ladder.rung("1e10|size99")


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


def test_the_forecasts_target_labels_its_params_non_embedding_with_the_total_beside():
    """The N the ladder fits is non-embedding: the target's record says so, never a bare "params"."""
    ladder = IsoflopLadderConfig(**LADDER)
    model, train = TrainRunConfig(model={"seq_len": 64}, target=ladder.target()).resolve(512)
    target = target_record(model, train, 1e11)
    assert "params" not in target
    assert target["non_embedding_params"] == model.num_params(include_embeddings=False)
    assert target["total_params"] == model.num_params() > target["non_embedding_params"]


def test_a_downstream_set_must_be_evaluated_and_a_target_declared():
    text = package_text("iso_errors/text", distributions=("idna",), include_stdlib=False)
    tokens = tokenizer_and_cache("iso_errors", text)
    ladder = isoflop_ladder("iso_errors", tokens, ladder=LADDER)
    with pytest.raises(StepError, match="downstream 'bpb/stdlib': no set 'stdlib' is evaluated"):
        forecast_target("iso_errors", ladder, downstream=["bpb/stdlib"])
    untargeted = isoflop_ladder("iso_errors2", tokens, ladder={**LADDER, "target_budget": None})
    with pytest.raises(StepError, match="no target_budget"):
        forecast_target("iso_errors2", untargeted)


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
