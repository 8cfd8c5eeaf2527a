"""`marin-pipelines forecast` and ``run_forecast``: text in, a preregistered forecast, then its target.

The ladder is real but tiny: standard-library source (fixed for a Python release, so the ladder is the same
every run) at vocabulary 512 and seq_len 64, the delphi recipe with head_dim 8 (its smallest shapes are
then d8/d16/d32, so budgets of 1e10-3e10 FLOPs train in seconds), 3 budgets x 3 sizes x 1 seed and a
target 3.3x the largest budget. Most of the time is XLA compiling each new shape.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin_pipelines.cli import main
from marin_pipelines.scaling.forecast_ladder import (
    TEXT_FILE,
    build_text_cache,
    check_same_cache,
    find_text,
    needed_tokens,
    read_forecast,
    run_forecast,
)
from marin_pipelines.scaling.isoflop_ladder import sweep_params
from marin_pipelines.scaling.recipe import recipe
from marin_pipelines.tokenize.tokenized_cache import TokenCache

STDLIB = Path(argparse.__file__).parent
TOP = ["argparse.py", "typing.py", "dataclasses.py", "enum.py", "inspect.py", "functools.py", "pathlib.py"]
NESTED = ["subprocess.py", "threading.py", "textwrap.py", "shutil.py", "tempfile.py", "contextlib.py"]
AS_JSONL = ["random.py", "statistics.py", "calendar.py"]
AS_PARQUET = ["fractions.py", "datetime.py", "difflib.py", "configparser.py"]
BUDGETS, TARGET = [1e10, 2e10, 3e10], 1e11
OPTIONS = {"head_dim": 8}
SETTINGS = {"vocab_size": 512, "seq_len": 64, "max_epochs": 4.0, "points_per_budget": 3}
FIELDS = {
    "recipe": str,
    "prediction": dict,
    "actual": float,
    "error": float,
    "extrapolation": float,
    "preregistered_at": str,
    "target_started_at": str,
    "runs": int,
    "seed_spread": type(None),  # one seed: no spread to measure
    "cpu_seconds": float,
}


def cli_args(text: Path, out: Path, budgets: str = "1e10,2e10,3e10") -> list[str]:
    """The command line that asks for what ``forecast`` (the fixture) ran."""
    return [
        "forecast", "--text", str(text), "--budgets", budgets, "--target", "1e11",
        "--recipe-option", "head_dim=8", "--points-per-budget", "3", "--vocab-size", "512",
        "--seq-len", "64", "--max-epochs", "4", "--out", str(out),
    ]  # fmt: skip


def write_corpus(folder: Path) -> Path:
    """Every kind of input: files at the top and in a subfolder (a document each), a .jsonl and a
    .parquet of several documents, and a hidden file and a bytecode cache that are not text (skipped)."""
    (folder / "nested" / "__pycache__").mkdir(parents=True)
    for name in TOP:
        (folder / name).write_bytes((STDLIB / name).read_bytes())
    for name in NESTED:
        (folder / "nested" / name).write_bytes((STDLIB / name).read_bytes())
    lines = [json.dumps({"text": (STDLIB / n).read_text(), "source": n}) for n in AS_JSONL]
    (folder / "nested" / "more.jsonl").write_text("\n".join(lines) + "\n")
    pq.write_table(
        pa.table({"text": [(STDLIB / n).read_text() for n in AS_PARQUET]}), folder / "shard.parquet"
    )
    (folder / ".hidden").write_bytes(b"\xff\xfe\x00binary")
    (folder / "nested" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\xa7\r\r\n\x00\x00\xff")
    return folder


@pytest.fixture(scope="module")
def forecast(tmp_path_factory) -> tuple[Path, Path, dict, list[str]]:
    """One whole forecast: the corpus, its out folder, the result and the progress lines."""
    root = tmp_path_factory.mktemp("forecast")
    text = write_corpus(root / "text")
    lines: list[str] = []
    result = run_forecast(
        [text], BUDGETS, TARGET, "delphi", 1, root / "out",
        recipe_overrides=OPTIONS, progress=lines.append, **SETTINGS,
    )  # fmt: skip
    return text, root / "out", result, lines


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_the_forecast_is_written_before_its_target_trains(forecast):
    _, out, result, lines = forecast
    assert set(result) == set(FIELDS)
    for field, kind in FIELDS.items():
        assert isinstance(result[field], kind), field
    prediction = result["prediction"]
    assert set(prediction) == {"loss", "low", "high"}
    assert prediction["low"] <= prediction["loss"] <= prediction["high"]
    assert result["error"] == pytest.approx((prediction["loss"] - result["actual"]) / result["actual"])
    assert abs(result["error"]) < 0.5  # a forecast, if a rough one at this size
    assert result["extrapolation"] == pytest.approx(TARGET / max(BUDGETS))
    assert (result["recipe"], result["runs"]) == ("delphi", 9)
    assert isinstance(result["cpu_seconds"], float)  # a number is reported; its size is not a test

    preregistered = datetime.fromisoformat(result["preregistered_at"])
    assert preregistered < datetime.fromisoformat(result["target_started_at"])
    written = json.loads((out / "forecast.json").read_text())
    assert written["preregistered_at"] == result["preregistered_at"]
    assert written["prediction"] == prediction
    cache = TokenCache(out / "cache")
    assert written["cache"] == cache.identity
    assert read_forecast(out / "forecast.json", cache) == written  # the ladder's own cache passes
    (out / "not-a-forecast.json").write_text(json.dumps({"prediction": {}}))
    with pytest.raises(
        ValueError, match="not-a-forecast.json is not a preregistered forecast: it has no forecast"
    ):
        read_forecast(out / "not-a-forecast.json", cache)
    with pytest.raises(ValueError, match="rung.json is not a preregistered forecast"):
        read_forecast(next((out / "rungs").rglob("rung.json")), cache)
    with pytest.raises(ValueError, match="not a readable forecast"):
        read_forecast(out / "missing.json", cache)
    check_same_cache({k: v for k, v in written.items() if k != "cache"}, cache)  # so does an older forecast
    with pytest.raises(ValueError, match=f"token cache 0123456789abcdef, and .* is {cache.identity}: give"):
        check_same_cache({**written, "cache": "0123456789abcdef"}, cache)  # runs on other data: refused
    assert {r["size"] for r in written["runs"]} == {"d8l2", "d16l2", "d32l2"}
    # the file was on disk before the target's first checkpoint existed
    checkpoints = files_under(out / "target" / "checkpoints")
    assert checkpoints
    assert (out / "forecast.json").stat().st_mtime_ns < min(p.stat().st_mtime_ns for p in checkpoints)
    assert json.loads((out / "result.json").read_text()) == result

    rungs = sorted(p.parent.relative_to(out / "rungs").as_posix() for p in (out / "rungs").rglob("rung.json"))
    assert rungs == [f"{b}/{s}-s0" for b in ("1e10", "2e10", "3e10") for s in ("d16l2", "d32l2", "d8l2")]
    assert lines[-1].startswith("target: budget 1e11 d32l2 seed 0: loss ")
    ladder = [line for line in lines if line.startswith("rung ")]
    assert len(ladder) == 9 and ladder[0].startswith("rung 1/9: budget 1e10 d8l2 seed 0: loss ")
    assert all(line.endswith(" s)") for line in ladder)  # trained, not reused
    # 13 plain files (the hidden file and the bytecode skipped) + 3 JSON lines + 4 parquet rows
    splits = cache.info["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == 20
    assert not (out / "text").exists()  # the staged copy of the plain files is gone once cached


def test_a_rerun_reuses_every_rung_and_the_forecast(forecast, capsys):
    text, out, first, _ = forecast
    before = {p: p.stat().st_mtime_ns for p in files_under(out) if p.name != "result.json"}
    assert main(cli_args(text, out)) == 0
    captured = capsys.readouterr()
    again = json.loads(captured.out.strip().splitlines()[-1])
    assert {k: v for k, v in again.items() if k != "cpu_seconds"} == {
        k: v for k, v in first.items() if k != "cpu_seconds"
    }
    progress = captured.err.splitlines()
    ladder = [line for line in progress if line.startswith("rung ")]
    assert len(ladder) == 9 and all(line.endswith("(reused)") for line in ladder)
    assert any(line.startswith("forecast reused: ") for line in progress)
    assert progress[-1].endswith("(reused)") and progress[-1].startswith("target: ")
    after = {p: p.stat().st_mtime_ns for p in files_under(out) if p.name != "result.json"}
    assert after == before  # no file written, none added: not the forecast, not a checkpoint


def test_a_rerun_with_other_arguments_is_refused(forecast):
    text, out, _, _ = forecast
    with pytest.raises(ValueError, match=r"other arguments \(budgets\)"):
        run_forecast(
            [text], [1e10, 2e10, 4e10], TARGET, "delphi", 1, out, recipe_overrides=OPTIONS, **SETTINGS
        )


def test_text_too_small_for_the_target_is_an_error_before_training(tmp_path, capsys):
    text = tmp_path / "small"
    text.mkdir()
    for name in ("textwrap.py", "copy.py"):
        (text / name).write_bytes((STDLIB / name).read_bytes())
    out = tmp_path / "out"
    assert main(cli_args(text, out)) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    vocab = json.loads((out / "cache" / "cache.json").read_text())["vocab_size"]
    target = recipe("delphi", **OPTIONS).run(TARGET, vocab, 64)
    assert error.startswith("marin-pipelines: error: the text is too small: its training split holds ")
    assert f"The target (d32l2 at 1e11 FLOPs, {target.tokens:,} tokens) needs " in error
    assert f"needs {needed_tokens(target, 4.0):,} training tokens" in error
    assert not (out / "rungs").exists() and not (out / "arguments.json").exists()


def test_an_empty_folder_or_a_binary_file_is_an_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="the folder holds no files"):
        run_forecast(
            [empty], BUDGETS, TARGET, "delphi", 1, tmp_path / "out", recipe_overrides=OPTIONS, **SETTINGS
        )
    (empty / "notes.txt").write_text("some text")
    (empty / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xff")
    with pytest.raises(ValueError, match=r"cannot read 1 of 2 files as UTF-8 text: .*image.png"):
        run_forecast(
            [empty], BUDGETS, TARGET, "delphi", 1, tmp_path / "out", recipe_overrides=OPTIONS, **SETTINGS
        )
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        run_forecast([tmp_path / "nowhere"], BUDGETS, TARGET, recipe_overrides=OPTIONS, **SETTINGS)
    assert not (tmp_path / "out" / "rungs").exists()


def test_the_validation_fraction_sets_the_held_out_share(tmp_path):
    text = write_corpus(tmp_path / "text")
    out = tmp_path / "out"
    shares = {}
    for fraction in (0.05, 0.5):  # the same folder: a cache built with another split is rebuilt
        cache = build_text_cache([text], out, 512, False, lambda _: None, fraction)
        splits = cache.info["splits"]
        shares[fraction] = splits["validation"]["documents"] / sum(s["documents"] for s in splits.values())
        assert json.loads((out / TEXT_FILE).read_text())["validation_fraction"] == fraction
    assert 0 < shares[0.05] < 0.25 < shares[0.5]
    too_many = r"--validation-fraction: Input should be less than or equal to 0.5, got 0.6"
    with pytest.raises(ValueError, match=too_many):
        run_forecast([text], BUDGETS, TARGET, validation_fraction=0.6, recipe_overrides=OPTIONS, **SETTINGS)


def test_budgets_the_recipe_cannot_sweep_are_refused_before_the_text_is_read(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"budget 5e09: the recipe gives 2 distinct shapes \(d8l2, d16l2\)"):
        run_forecast(
            [tmp_path], [5e9, 2e10, 3e10], TARGET, "delphi", 1, out, recipe_overrides=OPTIONS, **SETTINGS
        )
    with pytest.raises(ValueError, match="budget 1e09: recipe 'delphi' has no shape near"):
        run_forecast(
            [tmp_path], [1e9, 2e10, 3e10], TARGET, "delphi", 1, out, recipe_overrides=OPTIONS, **SETTINGS
        )
    with pytest.raises(ValueError, match="3 distinct budgets"):
        run_forecast([tmp_path], [1e10, 1e10, 3e10], TARGET, "delphi", 1, out, **SETTINGS)
    assert not out.exists()


def test_a_document_stage_folder_gives_its_shards_only(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b"]}), tmp_path / "documents-0-0.parquet")
    (tmp_path / "manifest.json").write_text("{}")
    (tmp_path / "removed-0-0.parquet").write_bytes(b"")
    found = find_text([tmp_path])
    assert (found.collections, found.plain) == ([tmp_path / "documents-0-0.parquet"], [])
    os.remove(tmp_path / "documents-0-0.parquet")
    found = find_text([tmp_path, tmp_path / "manifest.json"])
    assert found.collections == [tmp_path / "removed-0-0.parquet"]
    assert found.plain == [tmp_path / "manifest.json"] * 2


def test_the_sweep_spans_a_quarter_to_four_times_the_optimum():
    assert sweep_params(1000.0, 3) == pytest.approx([250.0, 1000.0, 4000.0])
    assert sweep_params(1000.0, 5) == pytest.approx([250.0, 500.0, 1000.0, 2000.0, 4000.0])
