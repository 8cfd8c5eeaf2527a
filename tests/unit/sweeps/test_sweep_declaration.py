"""The sweep step as an experiment declares it: what it sweeps, what its version hashes, and its best config
as a later training step's input (no Dagster, nothing trains)."""

import pytest
from tiny_pipeline import MODEL, tiny_run, tiny_tokens

from marin_pipelines.experiments.defaults import Sweep, evaluate, sweep, train, variant, warm_started
from marin_pipelines.stages.train import TrainRunConfig
from marin_pipelines.steps import StepError

SPACE = {"train.learning_rate": [0.03, 1.0e-6]}


def declared(space: dict = SPACE, name: str = "sweeps/lr", **settings) -> Sweep:
    return sweep(name, base=tiny_run(tiny_tokens(), "sweeps/base"), space=space, **{"trials": 2, **settings})


def test_a_sweep_takes_a_training_step_and_a_space_its_config_has():
    tokens = tiny_tokens()
    with pytest.raises(StepError, match=r"base must be a training step .*not tiny/tokenized_cache"):
        sweep("sweeps/lr", base=tokens.cache, space=SPACE, trials=2)
    with pytest.raises(StepError, match="base must be a Step"):
        sweep("sweeps/lr", base=tokens, space=SPACE, trials=2)
    with pytest.raises(StepError, match="the config has no field 'learnin_rate' in train; it has: steps"):
        declared({"train.learnin_rate": {"low": 1e-4, "high": 1e-2, "log": True}})
    with pytest.raises(StepError, match="empty range: low"):
        declared({"train.learning_rate": {"low": 1e-2, "high": 1e-4}})
    with pytest.raises(StepError, match=r"settings.pruner"):
        declared(pruner="successive")
    warm = warm_started(tiny_run(tokens, "sweeps/base"), "sweeps/warm", train={"steps": 4})
    with pytest.raises(StepError, match="takes warm_start; a sweep's trials train from scratch"):
        sweep("sweeps/lr", base=warm, space=SPACE, trials=2)


def test_its_inputs_are_the_bases_and_its_version_hashes_config_space_and_settings():
    swept = declared()
    assert dict(swept.step.inputs) == dict(swept.base.inputs)
    assert swept.step.config.base == swept.base.config
    assert declared().step.version == swept.step.version  # declared alike: one step
    others = [
        declared({"train.learning_rate": [0.03, 1.0e-5]}),
        declared(trials=3),
        declared(seed=1),
        declared(pruner="median"),
        declared(report_every=5),
        sweep("sweeps/lr", base=tiny_run(tiny_tokens(), "sweeps/base", steps=30), space=SPACE, trials=2),
    ]
    versions = {swept.step.version, *(other.step.version for other in others)}
    assert len(versions) == len(others) + 1


def test_the_best_of_a_sweep_is_an_input_of_a_training_step():
    tokens, swept = tiny_tokens(), declared()
    run = train("sweeps/best", tokens, model=MODEL, best_of=swept.best)
    assert run.inputs["best_of"] is swept.step and run.inputs["tokenized_cache"] is tokens.cache
    assert train("sweeps/best", tokens, model=MODEL, best_of=swept).version == run.version
    plain = train("sweeps/best", tokens, model=MODEL)
    other = train("sweeps/best", tokens, model=MODEL, best_of=declared(seed=1))
    assert len({plain.version, run.version, other.version}) == 3  # the sweep's version is in the run's
    again = variant(plain, "sweeps/best_longer", best_of=swept, train={"steps": 40})
    assert again.inputs["best_of"] is swept.step and again.config.train.steps == 40
    with pytest.raises(StepError, match="best_of must be a sweep"):
        train("sweeps/best", tokens, best_of=plain)
    with pytest.raises(StepError, match="takes best_of"):
        sweep("sweeps/again", base=run, space=SPACE, trials=2)
    with pytest.raises(StepError, match="sweeps/lr is a sweep, not a checkpoint"):
        evaluate("sweeps/eval", swept.step)


@pytest.mark.parametrize(
    "model",
    [
        {"size": "nano", "seq_len": 32},
        {"size": "micro", "seq_len": 64, "qk_norm": True, "moe": {"experts": 4, "top_k": 1}},
    ],
)
def test_the_run_config_a_sweep_trains_is_the_run_the_step_trains(model):
    config = TrainRunConfig(model=model, train={"steps": 70, "learning_rate": 0.01})
    run = config.run_config(vocab_size=300)
    assert (run.llama(300), run.train) == config.resolve(300)
