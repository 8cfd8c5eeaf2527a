"""`marin-pipelines forecast`: text in, a preregistered forecast, then its target, as steps in the store at
``--out`` run without Dagster (``marin_pipelines/forecast.py``). What it refuses before training:
``tests/unit/scaling/test_forecast_command.py``.

The ladder is real but tiny: standard-library source (fixed for a Python release, so the ladder is the same
every run) at vocabulary 512 and seq_len 32, the delphi recipe with head_dim 8 (its smallest shapes are
then d8 to d48, so budgets of 1e10-4e10 FLOPs train in seconds), 3 budgets x 3 sizes x 1 seed and a
target 2.5x the largest budget: the tests' tiny ladder (tests/tiny_ladder.py), whose shapes the run's
JAX cache then holds compiled once for both.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marin_pipelines.cli import main
from marin_pipelines.forecast import forecast_steps, run_forecast
from marin_pipelines.stages.scaling import FORECAST, RESULT
from marin_pipelines.store import ArtifactStore
from marin_pipelines.tokenize.tokenized_cache import TokenCache

STDLIB = Path(argparse.__file__).parent
TOP = ["argparse.py", "typing.py", "dataclasses.py", "enum.py", "inspect.py", "functools.py", "pathlib.py"]
NESTED = ["subprocess.py", "threading.py", "textwrap.py", "shutil.py", "tempfile.py", "contextlib.py"]
AS_JSONL = ["random.py", "statistics.py", "calendar.py"]
AS_PARQUET = ["fractions.py", "datetime.py", "difflib.py", "configparser.py"]
BUDGETS, TARGET = [1e10, 2e10, 4e10], 1e11  # the tests' tiny ladder's (tests/tiny_ladder.py)
OPTIONS = {"head_dim": 8}
SETTINGS = {"vocab_size": 512, "seq_len": 32, "max_epochs": 4.0, "points_per_budget": 3}
FIELDS = {
    "recipe": str,
    "prediction": dict,
    "interval_80": list,
    "interval_95": list,
    "actual": float,
    "error": float,
    "extrapolation": float,
    "preregistered_at": str,
    "target_started_at": str,
    "runs": int,
    "seed_spread": type(None),  # one seed: no spread to measure
    "cpu_seconds": float,
}


def cli_args(text: Path, out: Path) -> list[str]:
    """The command line that asks for what ``forecast`` (the fixture) ran."""
    return [
        "forecast", "--text", str(text), "--budgets", "1e10,2e10,4e10", "--target", "1e11",
        "--recipe-option", "head_dim=8", "--points-per-budget", "3", "--vocab-size", "512",
        "--seq-len", "32", "--max-epochs", "4", "--out", str(out),
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
    """One whole forecast: the corpus, its store, the result and the progress lines."""
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
    text, out, result, lines = forecast
    assert set(result) == set(FIELDS)
    for field, kind in FIELDS.items():
        assert isinstance(result[field], kind), field
    prediction = result["prediction"]
    assert set(prediction) == {"loss", "low", "high", "level", "interval_80", "interval_95", "sources"}
    (low_80, high_80), (low, high) = result["interval_80"], result["interval_95"]
    assert (prediction["low"], prediction["high"], prediction["level"]) == (low, high, 0.95)
    assert low <= low_80 <= prediction["loss"] <= high_80 <= high  # the 80% interval inside the 95%
    assert set(prediction["sources"]["95"]) == {"noise", "floor", "form"}
    assert result["error"] == pytest.approx((prediction["loss"] - result["actual"]) / result["actual"])
    assert abs(result["error"]) < 0.5  # a forecast, if a rough one at this size
    assert result["extrapolation"] == pytest.approx(TARGET / max(BUDGETS))
    assert (result["recipe"], result["runs"]) == ("delphi", 9)
    assert isinstance(result["cpu_seconds"], float)  # a number is reported; its size is not a test
    assert datetime.fromisoformat(result["preregistered_at"]) < datetime.fromisoformat(
        result["target_started_at"]
    )

    steps = forecast_steps(
        [text], BUDGETS, TARGET, {"name": "delphi", **OPTIONS}, 1, validation_fraction=0.05, **SETTINGS
    )
    store = ArtifactStore(out)

    def output(step, partition=None):
        artifact = store.get(step.key, step.version, partition)
        assert artifact is not None, f"{step.name} {partition} is not in the store"
        return artifact

    written = json.loads(output(steps.target.prediction).file(FORECAST).read_text())
    assert written["preregistered_at"] == result["preregistered_at"]
    assert written["prediction"] == prediction
    cache = TokenCache(output(steps.tokens.cache).url)
    assert written["cache"] == cache.identity
    assert {r["size"] for r in written["runs"]} == {"d8l2", "d16l2", "d32l2", "d24l2", "d48l2"}
    # the forecast was on disk before the target's first checkpoint existed
    target = output(steps.target.checkpoint)
    checkpoints = files_under(target.path / "checkpoints")
    assert checkpoints
    forecast_file = output(steps.target.prediction).file(FORECAST)
    assert forecast_file.stat().st_mtime_ns < min(p.stat().st_mtime_ns for p in checkpoints)
    law = json.loads(output(steps.target.scaling_law).file(RESULT).read_text())
    assert law["preregistered"] and law["actual"] == result["actual"]

    keys = steps.ladder.checkpoints.partition_keys()
    shapes = {
        "1e10": ("d8l2", "d16l2", "d32l2"),
        "2e10": ("d8l2", "d16l2", "d32l2"),
        "4e10": ("d8l2", "d24l2", "d48l2"),
    }
    assert keys == [f"{b}|size{i}" for b in shapes for i in (1, 2, 3)]  # the budget x size grid
    for key, shape in zip(keys, [s for sizes in shapes.values() for s in sizes], strict=True):
        evaluated = output(steps.ladder.evaluations, key).metadata
        assert evaluated["loss"] > 0 and (evaluated["shape"], evaluated["seed"]) == (shape, 0)
    assert lines[-1].startswith("target: budget 1e11 d32l2 seed 0: loss ")
    ladder = [line for line in lines if line.startswith("rung ")]
    assert len(ladder) == 9 and ladder[0].startswith("rung 1/9: budget 1e10 d8l2 seed 0: loss ")
    assert all(line.endswith(" s)") for line in ladder)  # trained, not reused
    # 13 plain files (the hidden file and the bytecode skipped) + 3 JSON lines + 4 parquet rows
    assert output(steps.text).metadata["funnel"] == {"docs_in": 20, "docs_out": 20, "removed": {}}
    splits = cache.info["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == 20


def test_a_rerun_reuses_every_step_and_writes_nothing(forecast, capsys):
    text, out, first, _ = forecast
    before = {p: p.stat().st_mtime_ns for p in files_under(out)}
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
    assert "(reused); the result: " in progress[-1] and progress[-1].startswith("target: ")
    assert not any("computing version" in line for line in progress)
    after = {p: p.stat().st_mtime_ns for p in files_under(out)}
    assert after == before  # no file written, none added: not the forecast, not a checkpoint
