"""Bad config (issue 16.6): an experiment with every field wrong at once, a training YAML with several wrong
fields, bad command-line values. Every bad field is reported at once, with its path, what is allowed and
where the step was declared; no pydantic dump and no traceback."""

import textwrap

import pytest
import yaml
from pydantic import BaseModel, Field

from marin_pipelines.cli import main
from marin_pipelines.config_errors import allowed_fields, describe
from marin_pipelines.experiment import ExperimentError, discover_experiments
from marin_pipelines.experiments import demo
from marin_pipelines.experiments.defaults import tokenizer_and_cache, train
from marin_pipelines.steps import StepError

EVERYTHING_WRONG = """
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    crawl_and_text, quality_and_curation, tokenizer_and_cache, train
)

text = crawl_and_text(
    "wrong",
    demo={"n_files": 1},
    web_documents={"max_record_bytes": -5, "content_types": ["html"]},
    filters={"bogus": 1},
)
quality = quality_and_curation("wrong", text.deduplicated_text)
tokens = tokenizer_and_cache("wrong", quality.curated_text, tokenizer={"vocab_size": 512})
run = train(
    "wrong/run",
    tokens,
    model={"size": "gigantic", "seq_len": 2, "colour": "blue"},
    train={"steps": "many", "batch_size": -1, "lr_schedule": "zigzag", "warmup": 3},
    data_mixture={"sources": {"main": {"weight": -1}, "extra": {"cache": "/nowhere"}}},
)
wrong = Experiment("wrong", steps=[run])
"""

NO_PYDANTIC_DUMP = ("Traceback", "errors.pydantic.dev", "validation error for", "type=", "Value error,")


def test_an_experiment_with_every_field_wrong_reports_them_all_with_the_place(tmp_path, capsys, monkeypatch):
    (tmp_path / "wrong.py").write_text(EVERYTHING_WRONG)
    with pytest.raises(ExperimentError) as error:
        discover_experiments([str(tmp_path)])
    message = str(error.value)
    # the crawl helper's steps: both bad steps, every bad field, at once
    line = EVERYTHING_WRONG.splitlines().index("text = crawl_and_text(") + 1
    assert f"{tmp_path / 'wrong.py'}: step 'wrong/web_documents' ({tmp_path / 'wrong.py'}:{line})" in message
    assert "max_record_bytes: Input should be greater than 0 (got -5)" in message
    assert "content_types: 'html' is not a MIME type" in message
    assert f"step 'wrong/filtered_text' ({tmp_path / 'wrong.py'}:{line}): invalid FilterConfig" in message
    assert (
        "bogus: unknown field; allowed: language, gopher_repetition, gopher_quality, c4, fineweb" in message
    )

    fixed = EVERYTHING_WRONG.replace(
        'web_documents={"max_record_bytes": -5, "content_types": ["html"]},\n    filters={"bogus": 1},\n', ""
    )
    (tmp_path / "wrong.py").write_text(fixed)
    monkeypatch.setenv("MARIN_EXPERIMENTS_PATH", str(tmp_path))
    assert main(["experiment", "wrong", "--dry-run"]) == 2
    err = capsys.readouterr().err
    line = fixed.splitlines().index("run = train(") + 1
    assert f"step 'wrong/run' ({tmp_path / 'wrong.py'}:{line}): invalid TrainRunConfig (9 problems):" in err
    for problem in (
        "model.size: unknown model size 'gigantic'; choose one of [",
        "model.seq_len: Input should be greater than or equal to 8 (got 2)",
        "model.colour: unknown field; allowed: size, seq_len",
        "train.steps: Input should be a valid integer, unable to parse string as an integer (got 'many')",
        "train.batch_size: Input should be greater than 0 (got -1)",
        "train.lr_schedule: Input should be 'cosine' or 'wsd' (got 'zigzag')",
        "train.warmup: unknown field; allowed: steps, batch_size, learning_rate, lr_schedule, warmup_steps",
        "data_mixture.sources.main.weight: Input should be greater than or equal to 0 (got -1)",
        "data_mixture.sources.extra.weight: required, not given",
    ):
        assert problem in err, problem
    assert not any(noise in err for noise in NO_PYDANTIC_DUMP), err


def test_one_helper_reports_every_step_it_declares_at_once():
    with pytest.raises(StepError) as error:
        tokenizer_and_cache(
            "bad", demo.quality.curated_text, tokenizer={"vocab_size": 12}, cache={"validation_fraction": 2}
        )
    message = str(error.value)
    assert "step 'bad/tokenizer' (tests/unit/test_bad_config.py:" in message
    assert "vocab_size: Input should be greater than or equal to 257 (got 12)" in message
    assert "step 'bad/tokenized_cache' (tests/unit/test_bad_config.py:" in message
    assert "validation_fraction: Input should be less than or equal to 0.5 (got 2)" in message


@pytest.mark.parametrize(
    ("declare", "said"),
    [
        (lambda: train("bad/run", None), "step 'bad/run' (tests/unit/test_bad_config.py:"),
        (lambda: train("bad/run", None), "tokens must be a TokenSteps (as the helpers return), not NoneType"),
        (lambda: tokenizer_and_cache("bad", None), "missing ['curated_text']"),
        (lambda: train("bad/run", demo.tokens, model="nano"), "model: Input should be a valid dictionary"),
        (
            lambda: train(
                "bad/run",
                demo.tokens,
                train={"batch_size": 8},
                data_mixture={"sources": {"main": {"weight": 1}, "tiny": {"cache": "/c", "weight": 0.01}}},
            ),
            "sources ['tiny'] get 0 of 8 sequences per batch; raise their weight or the batch size",
        ),
    ],
    ids=["missing_tokens_place", "missing_tokens", "missing_text", "not_a_dict", "starved_mixture_weight"],
)
def test_missing_inputs_and_bad_shapes_name_the_step(declare, said):
    with pytest.raises(StepError) as error:
        declare()
    assert said in str(error.value)


BAD_RUN = {
    "model": {"size": "gigantic", "seq_len": 32, "colour": "blue"},
    "train": {"steps": "many", "batch_size": -1, "lr_schedule": "zigzag", "warmup": 3},
    "data": {"sources": {"main": {"weight": -1}}},
    "extra_top": 1,
}


def train_cli(capsys, config, *more: str) -> tuple[int, str]:
    code = main(["train", "--config", str(config), "--data", "unused", "--out", "unused", *more])
    return code, capsys.readouterr().err


def test_a_training_yaml_with_several_wrong_fields_lists_them_all(tmp_path, capsys):
    config = tmp_path / "rün cönfig.yaml"
    config.write_text(yaml.safe_dump(BAD_RUN))
    code, err = train_cli(capsys, config)
    assert code == 2 and f"invalid training config {config}:\n" in err
    for problem in (
        "model.size: unknown model size 'gigantic'",
        "model.colour: unknown field; allowed: size, vocab_size, seq_len, d_model",
        "train.steps: Input should be a valid integer",
        "train.batch_size: Input should be greater than 0 (got -1)",
        "train.lr_schedule: Input should be 'cosine' or 'wsd' (got 'zigzag')",
        "train.warmup: unknown field; allowed: steps,",
        "data.sources.main.weight: Input should be greater than or equal to 0 (got -1)",
        "extra_top: unknown field; allowed: model, train, data",
    ):
        assert problem in err, problem
    assert not any(noise in err for noise in NO_PYDANTIC_DUMP), err

    config.write_text(yaml.safe_dump({"model": {"size": "nano", "d_model": -4, "n_heads": 0}}))
    code, err = train_cli(capsys, config)
    assert code == 2 and "model.seq_len: required, not given" in err and "model.d_model: Input" in err
    assert "model.n_heads: Input should be greater than 0 (got 0)" in err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("model: {size: nano\ntrain: [", "is not valid YAML at line 2, column 6"),
        ("", "model: required, not given"),
        ("- 1\n- 2\n", "(config): Input should be a valid dictionary"),
        (
            "model: [1]\ntrain: 7\n",
            "train: Input should be a valid dictionary or instance of TrainConfig (got 7)",
        ),
    ],
    ids=["not_yaml", "empty", "a_list", "wrong_types"],
)
def test_a_training_yaml_that_is_not_a_config_is_a_clear_error(tmp_path, capsys, text, said):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    code, err = train_cli(capsys, config)
    assert code == 2 and str(config) in err and said in err and "Traceback" not in err


def test_train_flags_are_checked_with_their_names(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump({"model": {"size": "nano", "seq_len": 32}, "train": {"warmup_steps": 30}})
    )
    with pytest.raises(SystemExit) as exit_:
        train_cli(capsys, config, "--steps", "0")
    assert exit_.value.code == 2 and "argument --steps: must be >= 1, got 0" in capsys.readouterr().err
    code, err = train_cli(capsys, config, "--steps", "5")
    assert code == 2 and "--steps 5" in err and "warmup_steps (30) must not exceed steps (5)" in err


def test_tokenize_flags_are_checked_with_their_names(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("some text")
    args = ["tokenize", "--input", str(tmp_path / "a.txt"), "--out", str(tmp_path / "out")]
    assert main([*args, "--vocab-size", "12", "--validation-fraction", "2"]) == 2
    err = capsys.readouterr().err
    assert "--validation-fraction: Input should be less than or equal to 0.5 (got 2.0)" in err
    assert main([*args, "--vocab-size", "12"]) == 2
    assert "--vocab-size: Input should be greater than or equal to 257 (got 12)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


class Inner(BaseModel):
    size: int = Field(1, gt=0)
    name: str = "x"


class Outer(BaseModel):
    model_config = {"extra": "forbid"}

    inner: Inner | None = None
    by_name: dict[str, Inner] = {}
    items: list[Inner] = []


def test_unknown_fields_list_the_allowed_ones_at_any_depth():
    assert allowed_fields(Outer, ()) == ["inner", "by_name", "items"]
    assert allowed_fields(Outer, ("inner",)) == ["size", "name"]
    assert allowed_fields(Outer, ("by_name", "a")) == ["size", "name"]
    assert allowed_fields(Outer, ("items", 3)) == ["size", "name"]
    assert allowed_fields(Outer, ("nope",)) is None
    with pytest.raises(Exception) as error:
        Outer(inner={"size": 0}, by_name={"a": {"size": "big"}}, items=[{}], colour=1)
    assert describe(error.value, Outer) == textwrap.dedent("""\
        invalid Outer (3 problems):
          inner.size: Input should be greater than 0 (got 0)
          by_name.a.size: Input should be a valid integer, unable to parse string as an integer (got 'big')
          colour: unknown field; allowed: inner, by_name, items""")


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        (["train"], ["--steps", "5", "--quiet"]),
        (["sft"], ["--heldout", "h.jsonl"]),
        (["eval"], ["--tasks", "marin_python_mc", "--batch-size", "4"]),
        (["sweep"], ["--trials", "3", "--workers", "2"]),
    ],
)
def test_a_flag_beside_a_step_config_is_refused_not_ignored(command, flags, capsys):
    assert main([*command, "--step-config", "launch.json", *flags]) == 2
    err = capsys.readouterr().err
    assert "give it without" in err and all(flag in err for flag in flags if flag.startswith("--"))
