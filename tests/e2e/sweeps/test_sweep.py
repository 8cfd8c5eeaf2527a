"""`marin-pipelines sweep` end to end on a tiny cache: trials that train and report, bad ones pruned at once
with their checkpoint and curve, every trial counted, the best config the best trial's, the last line, a
rerun that trains nothing again, and bad input refused."""

import json

import optuna
import polars as pl
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from sweep_inputs import BAD_LR, BASE, GOOD_LR, last_json, sweep_args, trial_lines, write_inputs

from marin_pipelines.cli import main
from marin_pipelines.sweeps.space import apply
from marin_pipelines.train.model import MODEL_SIZES, LlamaConfig
from marin_pipelines.train.run_config import RunConfig

# a good and a bad learning rate, twice each (log_every changes nothing the run computes: the two good trials
# report the same losses, and neither is worse than the other); the grid's order for seed 6 is good, bad,
# good, bad, so the median pruner (after one finished trial) has a bad trial to prune each time
SPACE = {"train.learning_rate": [GOOD_LR, BAD_LR], "train.log_every": [5, 10]}
FLAGS = ["--sampler", "grid", "--pruner", "median", "--startup-trials", "1", "--seed", "6"]
FLAGS += ["--report-every", "5"]


def test_a_sweep_prunes_bad_trials_at_once_and_keeps_the_best(token_cache, tmp_path, capsys):
    config, space = write_inputs(tmp_path, SPACE)
    out = tmp_path / "sweep"
    assert main(sweep_args(config, space, token_cache, out, 4, *FLAGS)) == 0
    printed = capsys.readouterr()
    result = last_json(printed.out)
    table = pl.read_parquet(out / "trials.parquet")
    lr = table["params"].struct.field("train.learning_rate")

    # every trial counted, each a run folder; the bad learning rates pruned, the good ones complete
    assert result["trials"] == {"complete": 2, "pruned": 2, "failed": 0}
    assert table["number"].to_list() == sorted(trial_lines(printed.err, "started")) == [0, 1, 2, 3]
    assert (table["state"] == "pruned").to_list() == (lr == BAD_LR).to_list()
    pruned = table.filter(pl.col("state") == "pruned")["number"].to_list()
    assert sorted(trial_lines(printed.err, "pruned")) == pruned
    journal = JournalStorage(JournalFileBackend(str(out / "study.journal")))
    study = optuna.load_study(study_name="sweep", storage=journal)
    for row in table.iter_rows(named=True):
        folder = out / "trials" / f"{row['number']:04d}"
        metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        reported = {m["step"] + 1: m["val_loss"] for m in metrics if "val_loss" in m}
        # reported every 5 steps, in metrics.jsonl and to the study alike
        assert reported == study.trials[row["number"]].intermediate_values
        assert sorted(reported) == list(range(5, len(metrics) + 1, 5))
        assert row["steps"] == len(metrics) and (folder / "loss_curve.png").is_file()
        saved = sorted(int(p.name) for p in (folder / "checkpoints").iterdir())
        if row["state"] == "pruned":  # stopped at the step it was pruned, its checkpoint there
            assert saved[-1] == len(metrics) < 20 and not (folder / "train.json").exists()
        else:
            assert saved[-1] == len(metrics) == 20 and row["value"] == reported[20]

    # FLOPs: every step of every trial, the pruned ones' up to their stop
    model = LlamaConfig(**MODEL_SIZES["nano"], seq_len=32, vocab_size=300)
    per_step = model.flops_per_token() * BASE["train"]["batch_size"] * 32
    assert result["flops"] == pytest.approx(per_step * table["steps"].sum()) == table["flops"].sum()

    # the best is the best complete trial, its config the base with its parameters
    complete = table.filter(pl.col("state") == "complete").sort("value")
    best = json.loads((out / "best.json").read_text())
    assert result["best"] == {k: best[k] for k in ("params", "value", "trial")}
    assert best["trial"] == complete["number"][0] and best["value"] == complete["value"][0]
    assert RunConfig.model_validate(best["config"]) == apply(RunConfig.model_validate(BASE), best["params"])
    trained = json.loads((out / "trials" / f"{best['trial']:04d}" / "train.json").read_text())["config"]
    assert trained == best["config"]["train"]
    assert all(
        (out / name).read_bytes()[:4] == b"\x89PNG" for name in ("history.png", "params.png", "curves.png")
    )

    # the same command again: the study is finished, nothing trains
    before = {p: p.stat().st_mtime_ns for p in (out / "trials").rglob("metrics.jsonl")}
    assert main(sweep_args(config, space, token_cache, out, 4, *FLAGS)) == 0
    again = capsys.readouterr()
    assert last_json(again.out) == result and trial_lines(again.err, "started") == []
    assert {p: p.stat().st_mtime_ns for p in (out / "trials").rglob("metrics.jsonl")} == before


def test_bad_input_is_refused_before_any_trial_trains(token_cache, tmp_path, capsys):
    config, space = write_inputs(
        tmp_path, {"train.learnin_rate": {"low": 1.0e-4, "high": 3.0e-2, "log": True}}
    )
    out = tmp_path / "sweep"
    assert main(sweep_args(config, space, token_cache, out, 2)) == 2
    err = capsys.readouterr().err
    assert (
        "train.learnin_rate: the config has no field 'learnin_rate' in train; it has: steps, batch_size"
        in err
    )
    assert not (out / "trials").exists()

    space.write_text("train.learning_rate: {low: 3.0e-2, high: 1.0e-4, log: true}\n")
    assert main(sweep_args(config, space, token_cache, out, 2)) == 2
    assert (
        "train.learning_rate: empty range: low (0.03) must be below high (0.0001)" in capsys.readouterr().err
    )

    space.write_text("train.learning_rate: [0.01, 0.03]\n")
    assert main(sweep_args(config, space, token_cache, out, 2, "--metric", "accuracy")) == 2
    assert (
        "metric: no trial reports 'accuracy'; trials report val_loss, train_loss" in capsys.readouterr().err
    )
    assert main(sweep_args(config, space, token_cache, out, 3, "--sampler", "grid")) == 2
    assert "the grid has 2 points: ask for 2 trials or fewer, not 3" in capsys.readouterr().err
    assert not (out / "trials").exists()


def test_a_sweep_whose_every_trial_fails_fails_with_their_errors(token_cache, tmp_path, capsys):
    # a valid config that the data refuses when a trial resolves its model (the cache has 300 token ids)
    config, space = write_inputs(tmp_path, {"model.vocab_size": [100, 200]})
    out = tmp_path / "sweep"
    assert main(sweep_args(config, space, token_cache, out, 2, "--sampler", "grid")) == 1
    printed = capsys.readouterr()
    assert "every trial of the sweep in" in printed.err
    for vocab in (100, 200):
        assert f"model.vocab_size ({vocab}) is below the data's vocab (300)" in printed.err
    assert sorted(trial_lines(printed.err, "failed")) == [0, 1]
    assert pl.read_parquet(out / "trials.parquet")["state"].to_list() == ["failed", "failed"]
    assert not (out / "best.json").exists()

    # its study is another sweep's to any other space: refused, naming both
    space.write_text("model.vocab_size: [400, 500]\n")
    assert main(sweep_args(config, space, token_cache, out, 2)) == 2
    err = capsys.readouterr().err
    assert f"{out}/study.journal holds the study of another sweep (" in err and ") than this one (" in err
    assert "space.model.vocab_size.choices: [100, 200] there, [400, 500] here" in err
