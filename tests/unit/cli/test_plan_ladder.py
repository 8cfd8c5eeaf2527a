"""`marin-pipelines plan-ladder`: a table on stderr, one JSON object last on stdout, exit 1 out of reach."""

import json

import pytest

from marin_pipelines.cli import main

# scaling_forecast's recipe constants, vocabulary and target; few candidates, one batch of draws each
ARGS = [
    "plan-ladder", "--target-budget", "1.6e13", "--vocab-size", "512", "--seq-len", "128",
    "--recipe-option", "head_dim=8", "--recipe-option", "target_steps=2048",
    "--max-budgets", "4", "--max-seeds", "2", "--max-draws", "40",
]  # fmt: skip


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_a_reachable_accuracy_prints_the_plan(capsys):
    assert main([*ARGS, "--error", "0.05"]) == 0
    out, err = capsys.readouterr()
    plan = last_json(out)
    for key in ("budgets", "points_per_budget", "seeds", "ladder_flops", "ratio", "probability", "error"):
        assert key in plan
    assert plan["reachable"] and plan["probability_interval"][0] >= 0.9 and plan["error"] == 0.05
    assert plan["draws"] == 40 and plan["max_draws"] == 40
    assert plan["ladder"]["recipe"] == {"name": "delphi", "head_dim": 8, "target_steps": 2048}
    assert "budgets  span  seeds" in err and "draws  interval    verdict" in err and "\nplan: " in err
    assert err.count("budgets over") == 2 * 2  # one progress line per candidate


def test_an_accuracy_out_of_reach_exits_1_with_the_best_candidate(capsys):
    assert main([*ARGS, "--error", "0.0001"]) == 1
    out, err = capsys.readouterr()
    plan = last_json(out)
    assert not plan["reachable"] and plan["budgets"] and plan["ladder_flops"] > 0
    assert "out of reach: " in err


def test_too_little_compute_exits_1(capsys):
    assert main([*ARGS, "--error", "0.05", "--max-ladder-ratio", "0.1"]) == 1
    assert not last_json(capsys.readouterr().out)["reachable"]


def test_bad_arguments_are_errors(capsys):
    assert main([*ARGS, "--error", "0"]) == 2
    assert "error: error must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one noise or the other
        main([*ARGS, "--error", "0.05", "--noise", "0.01", "--noise-from", "forecast.json"])
    assert "not allowed with argument" in capsys.readouterr().err
    assert main([*ARGS, "--error", "0.05", "--noise-from", "nowhere/forecast.json"]) == 2


def test_noise_from_a_forecast_without_seeds_says_so(tmp_path, capsys):
    path = tmp_path / "forecast.json"
    path.write_text(json.dumps({"forecast": {"seed_spread": None, "optima": []}}))
    assert main([*ARGS, "--error", "0.05", "--noise-from", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "has no seeds to measure noise on: using 0.61% a run" in err
    assert last_json(out)["noise"] == 0.0061
