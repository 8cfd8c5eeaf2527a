"""The search space: read from {dotted field: range or choices}, checked against the base config at once, and
applied to it as a validated run config."""

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from marin_pipelines.sweeps.space import SearchSpace, apply
from marin_pipelines.train.run_config import RunConfig

BASE = RunConfig(model={"size": "nano", "seq_len": 32}, train={"steps": 20, "warmup_steps": 2})


def test_ranges_and_choices_become_distributions():
    space = SearchSpace.parse(
        {
            "train.learning_rate": {"low": 1.0e-4, "high": 3.0e-2, "log": True},
            "train.weight_decay": {"low": 0, "high": 1},  # a float field: integer bounds still mean floats
            "train.warmup_steps": {"low": 0, "high": 4},
            "model.d_model": {"low": 32, "high": 128, "step": 32},
            "train.beta2": {"low": 0.9, "high": 0.99, "int": False, "grid": [0.9, 0.95, 0.99]},
            "train.optimizer": ["adamw", "muon"],
            "data.sources.main.weight": {"low": 0.5, "high": 1.0, "step": 0.25},
        },
        BASE,
    )
    found = space.distributions()
    assert found["train.learning_rate"] == FloatDistribution(1e-4, 3e-2, log=True)
    assert found["train.weight_decay"] == FloatDistribution(0.0, 1.0)
    assert found["train.warmup_steps"] == IntDistribution(0, 4)
    assert found["model.d_model"] == IntDistribution(32, 128, step=32)
    assert found["train.optimizer"] == CategoricalDistribution(["adamw", "muon"])
    assert list(found) == [p.name for p in space.params]  # in the order given
    with pytest.raises(ValueError, match="train.learning_rate, train.weight_decay a step .* or grid"):
        space.grid()
    grid = SearchSpace.parse(
        {
            "model.d_model": {"low": 32, "high": 128, "step": 32},
            "train.beta2": {"low": 0.9, "high": 0.99, "grid": [0.9, 0.95, 0.99]},
            "train.optimizer": ["adamw", "muon"],
            "data.sources.main.weight": {"low": 0.5, "high": 1.0, "step": 0.25},
        },
        BASE,
    )
    assert grid.grid() == {
        "model.d_model": [32, 64, 96, 128],
        "train.beta2": [0.9, 0.95, 0.99],
        "train.optimizer": ["adamw", "muon"],
        "data.sources.main.weight": [0.5, 0.75, 1.0],
    }
    assert grid.grid_size() == 4 * 3 * 2 * 3


def test_applying_params_gives_a_validated_config():
    run = apply(BASE, {"train.learning_rate": 0.01, "model.d_model": 128, "data.sources.main.weight": 0.5})
    assert run.train.learning_rate == 0.01 and run.train.steps == 20
    assert run.model == {"size": "nano", "seq_len": 32, "d_model": 128}
    assert run.llama(300).d_model == 128 and run.data.sources["main"].weight == 0.5
    assert BASE.train.learning_rate != 0.01  # the base is left as it was
    with pytest.raises(ValueError, match=r"\{'model.d_model': 90\}: model: d_model \(90\) must be divisible"):
        apply(BASE, {"model.d_model": 90})
    with pytest.raises(ValueError, match="train.warmup_steps.*must not exceed steps"):
        apply(BASE, {"train.warmup_steps": 50})


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (
            {"train.learnin_rate": [1e-3]},
            "train.learnin_rate: the config has no field 'learnin_rate' in train; it has: steps, batch_size, "
            "learning_rate, ",
        ),
        ({"model.dmodel": [64]}, "no field 'dmodel' in model; it has: size, vocab_size, seq_len, d_model, "),
        ({"lr": [1e-3]}, "no field 'lr' at its top; it has: model, train, data"),
        ({"data.sources.web.weight": [1.0]}, "no field 'web' in data.sources; it has: main"),
        ({"train.mesh": [1]}, "train.mesh is a section, not a value: name one of model, expert"),
        ({"train.learning_rate.peak": [1]}, "train.learning_rate is a value, not a section"),
        ({"train.learning_rate": {"low": 0.1, "high": 0.01}}, r"empty range: low \(0.1\) must be below high"),
        ({"train.learning_rate": {"low": 0.1, "high": 0.1}}, "empty range"),
        ({"train.weight_decay": {"low": 0.0, "high": 0.3, "log": True}}, r"a log range needs low > 0"),
        ({"train.optimizer": []}, "train.optimizer: no choices"),
        ({"train.optimizer": ["adamw", "adamw"]}, "choices must be distinct"),
        ({"train.optimizer": ["adamw", "sgd"]}, "train.optimizer: the config refuses 'sgd'.*'adamw'"),
        ({"train.learning_rate": {"low": 0, "high": 0.1}}, "the config refuses 0.*greater than 0"),
        ({"train.learning_rate": {"low": 1e-3, "hi": 0.1}}, "unknown hi; a range has low, high, log, int"),
        ({"train.learning_rate": {"low": "a", "high": 0.1}}, "train.learning_rate.low"),
        ({"train.learning_rate": 0.1}, r"give \{low, high\}"),
        ({"train.weight_decay": {"low": 0, "high": 1, "step": 0.3}}, "no multiple of step"),
        ({"train.learning_rate": {"low": 1e-4, "high": 0.1, "log": True, "step": 0.01}}, "log or step"),
        ({"train.learning_rate": {"low": 1e-3, "high": 0.1, "grid": [0.5]}}, "grid values must lie within"),
        ({"train.warmup_steps": {"low": 0, "high": 4, "int": True, "step": 0.5}}, "an integer range needs"),
        ({}, "the search space is empty"),
    ],
)
def test_bad_spaces_are_refused_naming_the_field(space, message):
    with pytest.raises(ValueError, match=message):
        SearchSpace.parse(space, BASE)


def test_a_space_file_is_read_and_its_errors_name_it(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("train.learning_rate: {low: 1.0e-4, high: 3.0e-2, log: true}\nmodel.d_model: [64, 128]\n")
    space = SearchSpace.load(str(path), BASE)
    assert [p.name for p in space.params] == ["train.learning_rate", "model.d_model"]
    path.write_text("train.momentum: [0.9]\n")
    with pytest.raises(ValueError, match=f"{path}: search space, train.momentum: the config has no field"):
        SearchSpace.load(str(path), BASE)
    path.write_text("train.learning_rate: {low: [\n")
    with pytest.raises(ValueError, match="search space .* is not valid YAML at line 2"):
        SearchSpace.load(str(path), BASE)
