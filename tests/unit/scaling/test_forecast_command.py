"""``marin-pipelines forecast`` before anything trains: its steps, and every refusal that saves a ladder's
worth of training (the run itself: ``tests/e2e/scaling/test_forecast.py``)."""

import argparse
from pathlib import Path

import pytest

from marin_pipelines.cli import main
from marin_pipelines.forecast import forecast_steps, needed_tokens, run_forecast
from marin_pipelines.scaling.isoflop_ladder import sweep_params
from marin_pipelines.scaling.recipe import recipe
from marin_pipelines.step_runner import run_steps
from marin_pipelines.store import ArtifactStore
from marin_pipelines.tokenize.tokenized_cache import TokenCache

STDLIB = Path(argparse.__file__).parent
BUDGETS, TARGET = [1e10, 2e10, 3e10], 1e11
OPTIONS = {"head_dim": 8}
SETTINGS = {"vocab_size": 512, "seq_len": 64, "max_epochs": 4.0, "points_per_budget": 3}


def small_text(folder: Path, names: tuple[str, ...] = ("textwrap.py", "copy.py")) -> Path:
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes((STDLIB / name).read_bytes())
    return folder


def declared(text: Path, budgets: list[float] = BUDGETS, fraction: float = 0.05):
    return forecast_steps(
        [text], budgets, TARGET, {"name": "delphi", **OPTIONS}, 1, validation_fraction=fraction, **SETTINGS
    )


def test_other_arguments_are_other_steps_beside_the_first(tmp_path):
    text = small_text(tmp_path / "text")
    first, other = declared(text), declared(text, [1e10, 2e10, 4e10])
    assert first.tokens.cache.version == other.tokens.cache.version  # the same data, reused
    assert first.ladder.checkpoints.version != other.ladder.checkpoints.version
    assert first.target.prediction.version != other.target.prediction.version
    assert first.target.checkpoint.version == other.target.checkpoint.version  # the target is the rule's
    (text / "copy.py").write_text("changed")  # a changed file is other text: everything after it too
    changed = declared(text)
    assert changed.text.version != first.text.version
    assert changed.ladder.checkpoints.version != first.ladder.checkpoints.version
    assert [s.name for s in first.target.scaling_law.upstream()][-1] == "forecast/isoflop_law"


def test_text_too_small_for_the_target_is_an_error_before_training(tmp_path, capsys):
    text, out = small_text(tmp_path / "small"), tmp_path / "out"
    args = [
        "forecast", "--text", str(text), "--budgets", "1e10,2e10,3e10", "--target", "1e11",
        "--recipe-option", "head_dim=8", "--points-per-budget", "3", "--vocab-size", "512",
        "--seq-len", "64", "--max-epochs", "4", "--out", str(out),
    ]  # fmt: skip
    assert main(args) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    cache = TokenCache(next((out / "forecast" / "tokenized_cache").glob("_/*")))
    target = recipe("delphi", **OPTIONS).run(TARGET, cache.info["vocab_size"], 64)
    assert error.startswith("marin-pipelines: error: the text is too small: its training split holds ")
    assert f"The target (d32l2 at 1e11 FLOPs, {target.tokens:,} tokens) needs " in error
    assert f"needs {needed_tokens(target, 4.0):,} training tokens" in error
    assert sorted(p.name for p in (out / "forecast").iterdir()) == [
        "text_files",
        "tokenized_cache",
        "tokenizer",
    ]


def test_missing_empty_or_binary_text_is_an_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="the folder holds no files"):
        run_forecast([empty], BUDGETS, TARGET, out_dir=tmp_path / "out", recipe_overrides=OPTIONS, **SETTINGS)
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        run_forecast([tmp_path / "nowhere"], BUDGETS, TARGET, recipe_overrides=OPTIONS, **SETTINGS)
    assert not (tmp_path / "out").exists()
    (empty / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xff")
    with pytest.raises(ValueError, match=r"forecast/text_files: no document in .*'not_utf8': 1"):
        run_forecast([empty], BUDGETS, TARGET, out_dir=tmp_path / "out", recipe_overrides=OPTIONS, **SETTINGS)


def test_the_validation_fraction_sets_the_held_out_share(tmp_path):
    text = small_text(tmp_path / "text", ("textwrap.py", "copy.py", "typing.py", "enum.py", "shutil.py"))
    for i in range(20):  # more documents, each a file
        (text / f"part{i}.txt").write_text((STDLIB / "argparse.py").read_text()[i * 3000 : (i + 1) * 3000])
    shares = {}
    for fraction in (0.05, 0.5):
        steps = declared(text, fraction=fraction)
        built = run_steps([steps.tokens.cache], ArtifactStore(tmp_path / "out"))
        splits = TokenCache(built.output(steps.tokens.cache).url).info["splits"]
        shares[fraction] = splits["validation"]["documents"] / sum(s["documents"] for s in splits.values())
    assert 0 < shares[0.05] < 0.25 < shares[0.5]
    too_many = r"--validation-fraction: Input should be less than or equal to 0.5, got 0.6"
    with pytest.raises(ValueError, match=too_many):
        run_forecast([text], BUDGETS, TARGET, validation_fraction=0.6, recipe_overrides=OPTIONS, **SETTINGS)


def test_budgets_the_recipe_cannot_sweep_are_refused_before_the_text_is_read(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"budget 5e09: the recipe gives 2 distinct shapes \(d8l2, d16l2\)"):
        run_forecast([tmp_path], [5e9, 2e10, 3e10], TARGET, out_dir=out, recipe_overrides=OPTIONS, **SETTINGS)
    with pytest.raises(ValueError, match="budget 1e09: recipe 'delphi' has no shape near"):
        run_forecast([tmp_path], [1e9, 2e10, 3e10], TARGET, out_dir=out, recipe_overrides=OPTIONS, **SETTINGS)
    with pytest.raises(ValueError, match="3 distinct budgets"):
        run_forecast([tmp_path], [1e10, 1e10, 3e10], TARGET, out_dir=out, **SETTINGS)
    with pytest.raises(ValueError, match="unknown recipe 'chinchilla'"):
        run_forecast([tmp_path], BUDGETS, TARGET, "chinchilla", out_dir=out, **SETTINGS)
    assert not out.exists()


def test_the_sweep_spans_a_quarter_to_four_times_the_optimum():
    assert sweep_params(1000.0, 3) == pytest.approx([250.0, 1000.0, 4000.0])
    assert sweep_params(1000.0, 5) == pytest.approx([250.0, 500.0, 1000.0, 2000.0, 4000.0])
