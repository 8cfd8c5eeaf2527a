import pytest

from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import (
    Target,
    preregistered_target,
    scaling_ladder,
    train,
)
from marin_pipelines.steps import StepError
from marin_pipelines.train.train_config import TrainConfig


def target_for(ladder: dict) -> Target:
    """The demo's ladder and preregistered target declared again over the demo's tokens with ``ladder``."""
    rungs = scaling_ladder(
        "demo",
        demo.tokens,
        ladder=ladder,
        seq_len=demo.MODEL["seq_len"],
        train=demo.TRAIN,
        evals=demo.EVALS,
    )
    return preregistered_target("demo", rungs, model=demo.MODEL, train=demo.TRAIN, evals=demo.EVALS)


def test_the_prediction_never_depends_on_the_run_it_predicts():
    target = demo.target
    before_prediction = target.prediction.upstream()
    assert target.checkpoint not in before_prediction and target.evaluation not in before_prediction
    assert demo.ladder.evaluations in before_prediction
    assert {target.prediction, target.evaluation, target.checkpoint} <= set(target.scaling_law.upstream())
    # the run comes after its prediction: an ordering edge, not an input that would version it
    assert target.checkpoint.after == (target.prediction,)
    assert target.prediction not in target.checkpoint.inputs.values()
    order = target.scaling_law.upstream()
    assert order.index(target.prediction) < order.index(target.checkpoint)


def test_a_new_rung_repredicts_without_retraining_the_target():
    base = demo.ladder.config.model_dump()
    same = target_for(base)
    assert same.prediction.version == demo.target.prediction.version  # declared as the demo declares it
    assert same.checkpoint.version == demo.target.checkpoint.version
    ladder = {**base, "budgets": [*base["budgets"], 8e11]}
    more = target_for(ladder)
    assert more.prediction.version != demo.target.prediction.version
    assert more.checkpoint.version == demo.target.checkpoint.version
    rule = target_for({**ladder, "batch_size": 4})
    assert rule.checkpoint.version != demo.target.checkpoint.version  # the rule trains the target too


def test_the_demo_target_is_ten_times_the_largest_rung():
    ladder = demo.ladder.config
    model, run = demo.target.checkpoint.config.resolve(vocab_size=2048)
    assert ladder.target_budget >= 10 * max(ladder.budgets)
    spent = run.steps * run.batch_size * model.seq_len * model.flops_per_token()
    assert spent == pytest.approx(ladder.target_budget, rel=0.01)
    assert (run.batch_size, run.learning_rate) == (ladder.batch_size, ladder.learning_rate)

    # without a target budget there is no target to preregister; a plain run trains as given
    without = {**ladder.model_dump(), "target_budget": None}
    with pytest.raises(StepError, match="no target_budget"):
        target_for(without)
    plain = train("demo/plain_checkpoint", demo.tokens, model=demo.MODEL, train=demo.TRAIN)
    assert plain.config.target is None
    assert plain.config.resolve(2048)[1] == TrainConfig(**demo.TRAIN)
