import pytest

from marin_pipelines.experiments import demo, scaling_forecast
from marin_pipelines.experiments.defaults import Target, forecast_target, isoflop_ladder, train
from marin_pipelines.scaling.isoflop_ladder import target_run
from marin_pipelines.steps import StepError
from marin_pipelines.train.train_config import TrainConfig


def target_for(ladder: dict) -> Target:
    """The demo's ladder and forecast target declared again over the demo's tokens with ``ladder``."""
    rungs = isoflop_ladder(
        "demo",
        demo.tokens,
        ladder=ladder,
        train=demo.LADDER_TRAIN,
        data_mixture=demo.MIXTURE,
    )
    return forecast_target("demo", rungs, downstream=["bpb/main"], evals=demo.EVALS)


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


def test_a_new_rung_reforecasts_without_retraining_the_target():
    base = demo.ladder.config.model_dump()
    same = target_for(base)
    assert same.prediction.version == demo.target.prediction.version  # declared as the demo declares it
    assert same.checkpoint.version == demo.target.checkpoint.version
    ladder = {**base, "budgets": [*base["budgets"], 8e11]}
    more = target_for(ladder)
    assert more.prediction.version != demo.target.prediction.version
    assert more.checkpoint.version == demo.target.checkpoint.version
    seeds = target_for({**base, "seeds": 2})
    assert seeds.checkpoint.version == demo.target.checkpoint.version
    recipe = target_for({**ladder, "recipe": {**base["recipe"], "learning_rate": 1e-3}})
    assert recipe.checkpoint.version != demo.target.checkpoint.version  # the recipe trains the target too


def test_the_demo_target_is_the_recipes_run_past_the_largest_rung():
    ladder = demo.ladder.config
    model, run = demo.target.checkpoint.config.resolve(vocab_size=2048)
    assert ladder.target_budget >= 5 * max(ladder.budgets)  # the demo's time allows 5x
    forecast = scaling_forecast.ladder.config  # the experiment forecasts 10x and more
    assert forecast.target_budget >= 10 * max(forecast.budgets)
    planned = target_run(ladder.target())
    assert (model, run.batch_size, run.steps, run.learning_rate) == (
        planned.model,
        planned.train.batch_size,
        planned.train.steps,
        planned.train.learning_rate,
    )
    spent = run.steps * run.batch_size * model.seq_len * model.flops_per_token()
    assert spent == pytest.approx(ladder.target_budget, rel=0.05)
    assert run.max_epochs == demo.LADDER_TRAIN["max_epochs"]  # it trains as the rungs do

    # without a target budget there is no target to forecast; a plain run trains as given
    without = {**ladder.model_dump(), "target_budget": None}
    with pytest.raises(StepError, match="no target_budget"):
        target_for(without)
    plain = train("demo/plain_checkpoint", demo.tokens, model=demo.MODEL, train=demo.TRAIN)
    assert plain.config.target is None
    assert plain.config.resolve(2048)[1] == TrainConfig(**demo.TRAIN)
