"""The eval asset through the local launcher: a real child process under Dagster Pipes, on a tiny run."""

import json
import os
import socket

import pytest
from dagster import DagsterInstance
from tiny_pipeline import tiny_tokens

from marin_pipelines.cli import main
from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS_DIR
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import evaluate, train
from marin_pipelines.store import ArtifactStore
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, TokenizerConfig, train_tokenizer

NOTES = "Lists hold items in order; dictionaries map keys to values; sets hold each item once."


@pytest.fixture(scope="module")
def evaluated(tiny_store, tmp_path_factory):
    """The tiny pipeline's data (built already) through a checkpoint's eval_results, with a held-out set
    of two files."""
    folder = tmp_path_factory.mktemp("evals")
    (folder / "notes.txt").write_text(NOTES)
    tokens = tiny_tokens()
    checkpoint = train(
        "evaltiny/checkpoint",
        tokens,
        model={"size": "nano", "seq_len": 32},
        train={"steps": 10, "batch_size": 8, "warmup_steps": 2, "log_every": 5},
    )
    evaluation = evaluate(
        "evaltiny/eval_results",
        checkpoint,
        evals={
            "tasks": ["marin_python_qa"],
            "limit": 4,
            "heldout": {"notes": [str(folder / "notes.txt"), str(SHIPPED_TASKS_DIR / "text.jsonl")]},
        },
        batch_size=8,
    )
    experiment = Experiment("evaltiny", steps=[evaluation])
    instance = DagsterInstance.ephemeral()
    run = materialize_experiment(experiment, tiny_store, instance, through="evaltiny/eval_results")
    store = ArtifactStore(tiny_store)
    artifacts = {
        step.stage.name: store.get(step.key, step.version)
        for step in (tokens.tokenizer, checkpoint, evaluation)
    }
    return run, instance, artifacts, folder


def test_evaluation_runs_in_a_child_process_under_pipes(evaluated):
    run, instance, _, _ = evaluated
    (result,) = [m for m in run.materialized if m.asset == "evaltiny/eval_results"]
    where = result.metadata["evaluated_on"]
    assert where["pid"] != os.getpid() and where["host"] == socket.gethostname()
    assert where["devices"].startswith("1 x ")
    assert all(c.passed for c in run.checks if c.asset == "evaltiny/eval_results"), run.checks
    # the child's progress lines arrived in the run's event log through Pipes
    messages = [e.user_message for r in instance.get_runs() for e in instance.all_logs(r.run_id)]
    assert any(m.startswith("bits per byte of notes:") for m in messages)
    assert any(m.startswith("lm-eval: 1 tasks in") for m in messages)


def test_the_child_evaluates_mixture_sources_heldout_sets_and_tasks(evaluated):
    run, _, artifacts, _ = evaluated
    (result,) = [m for m in run.materialized if m.asset == "evaltiny/eval_results"]
    results = json.loads(artifacts["eval_results"].file("results.json").read_text())
    assert set(results["bpb"]) == {"main", "notes", "overall"}  # the mixture's one source, by name
    assert results["n-samples"]["marin_python_qa"]["effective"] == 4  # the experiment's limit
    both_files = sum(len(t.encode()) for t in [NOTES, *_texts(SHIPPED_TASKS_DIR / "text.jsonl")])
    assert results["bpb"]["notes"]["bytes"] == both_files  # a held-out set of two files is one set
    scores = result.metadata["scores"]
    # one source: the mixture's bits-per-byte is its own (the UI shows numbers to 4 significant digits)
    assert scores["bpb/main"] == pytest.approx(result.metadata["bits_per_byte"], rel=1e-3)
    assert result.metadata["bits_per_byte"] > 0
    assert "marin_python_qa/exact_match" in scores and "bpb/notes" in scores


def _texts(jsonl):
    return [json.loads(line)["text"] for line in jsonl.read_text().splitlines()]


def test_the_checkpoint_carries_its_tokenizer_and_the_cli_uses_it(evaluated, tmp_path, capsys):
    _, _, artifacts, folder = evaluated
    checkpoint, tokenizer = artifacts["checkpoint"].path, artifacts["tokenizer"].path
    copied, made = (json.loads((d / TOKENIZER_FILE).read_text()) for d in (checkpoint, tokenizer))
    assert copied == made
    out = tmp_path / "eval.json"
    assert (
        main(["eval", "--checkpoint", str(checkpoint), "--bpb", str(folder / "notes.txt"), "--out", str(out)])
        == 0
    )
    cli = json.loads(out.read_text())["bpb"]["notes.txt"]
    assert cli["bytes"] == len(NOTES.encode())

    other = tmp_path / TOKENIZER_FILE  # --tokenizer still overrides the checkpoint's own
    train_tokenizer([NOTES], TokenizerConfig(vocab_size=300)).save(str(other))
    args = [
        "eval",
        "--checkpoint",
        str(checkpoint),
        "--tokenizer",
        str(other),
        "--bpb",
        str(folder / "notes.txt"),
    ]
    assert main([*args, "--out", str(out)]) == 0
    overridden = json.loads(out.read_text())["bpb"]["notes.txt"]
    assert overridden["bytes"] == cli["bytes"] and overridden["tokens"] != cli["tokens"]
