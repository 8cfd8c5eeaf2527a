import json

import numpy as np
import pytest
from pydantic import ValidationError

from marin_pipelines.scaling.speedrun import (
    Submission,
    discover_submissions,
    leaderboard_markdown,
    load_results,
    pareto_frontier,
    plot_leaderboard,
    submission_result,
    submission_slopes,
)
from marin_pipelines.tokenize.sequence_loader import SequenceLoader
from marin_pipelines.train.model import MODEL_SIZES
from marin_pipelines.train.trainer import train


def result(name: str, flops: float, bpb: float) -> dict:
    return {
        "submission": name,
        "author": "a",
        "description": "d",
        "budget": flops,
        "params": 1000,
        "tokens": 100,
        "model_flops": flops,
        "hardware_flops": 4 * flops,
        "wall_seconds": 1.0,
        "hardware": "cpu: cpu",
        "devices": 1,
        "peak_flops": 1e9,
        "bits_per_byte": bpb,
    }


RESULTS = [result("a", 1e10, 2.0), result("a", 4e10, 1.6), result("b", 1e10, 1.9), result("c", 4e10, 1.7)]


def test_pareto_frontier_keeps_only_undominated_runs():
    assert [(r["submission"], r["model_flops"]) for r in pareto_frontier(RESULTS)] == [
        ("b", 1e10),
        ("a", 4e10),
    ]


def test_slope_is_fitted_only_for_submissions_with_several_budgets():
    slopes = submission_slopes(RESULTS)
    assert set(slopes) == {"a"}
    assert slopes["a"] == pytest.approx(np.log(1.6 / 2.0) / np.log(4))


def test_leaderboard_ranks_within_each_budget(tmp_path):
    table = leaderboard_markdown(RESULTS)
    rows = [line for line in table.splitlines() if line.startswith("| 1e+10") or line.startswith("| 4e+10")]
    assert [row.split("|")[3].strip() for row in rows] == ["b *", "a", "a *", "c"]
    assert "25.0%" in table  # MFU = model / hardware FLOPs
    assert "a: bpb ∝ C^" in table
    plot_leaderboard(RESULTS, tmp_path / "board.png")
    assert (tmp_path / "board.png").read_bytes()[:4] == b"\x89PNG"


def test_shipped_submissions_are_found_and_valid():
    submissions = discover_submissions()
    assert {"nano_baseline", "nano_hot", "shallow_wide", "nano_moe", "nano_muon"} <= {
        s.name for s in submissions
    }
    moe = next(s for s in submissions if s.name == "nano_moe")
    model, train = moe.run_config(1e11, 2048)
    assert model.moe is not None and train.steps == round(
        1e11 / model.flops_per_token() / (8 * 128)
    )  # active FLOPs
    assert any(len(s.budgets) > 1 for s in submissions)  # one spans budgets: the leaderboard fits its slope


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"model": {"d_model": 64}}, "missing \\['d_ff', 'n_heads'"),
        ({"train": {"steps": 5}}, "follow from the budget"),
        ({"train": {"learning_rat": 1e-3}}, "learning_rat"),
        ({"budgets": [-1.0]}, "budgets must be positive"),
    ],
)
def test_bad_submissions_name_the_field(update, field):
    fields = {"name": "x", "author": "a", "description": "d", "model": MODEL_SIZES["nano"], "budgets": [1e9]}
    with pytest.raises(ValidationError, match=field):
        Submission(**{**fields, **update})


def test_a_run_records_flops_hardware_and_bits_per_byte(tmp_path):
    shape = {"d_model": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "d_ff": 64}
    submission = Submission(
        name="t",
        author="me",
        description="tiny",
        model=shape,
        seq_len=16,
        train={"batch_size": 4},
        budgets=[1e8],
    )
    tokens = np.random.default_rng(0).integers(0, 64, 5000).astype(np.uint16)
    model, config = submission.run_config(1e8, 64)
    loader = SequenceLoader(tokens, model.seq_len, config.batch_size, config.seed)
    summary = train(model, config, loader.batch, tmp_path / "run", progress=False)
    out = submission_result(submission, 1e8, summary, 1.5)
    (tmp_path / "run" / "results.json").write_text(json.dumps(out))
    assert out["tokens"] == config.steps * 4 * 16
    assert out["model_flops"] == pytest.approx(model.flops_per_token() * out["tokens"])
    assert out["model_flops"] == pytest.approx(1e8, rel=0.1)  # whole steps that spend the budget
    assert out["hardware_flops"] > 0 and out["bits_per_byte"] == 1.5 and out["hardware"].startswith("cpu")
    assert load_results(tmp_path) == [json.loads((tmp_path / "run" / "results.json").read_text())]
