"""A served evaluation against an in-process one on the same run and the shipped tasks: `marin-pipelines
serve` as a real child process, lm-eval's own local-completions / local-chat-completions asking it. Item by
item, log-likelihoods agree within 1e-4 and greedy generations are identical."""

import json
from pathlib import Path

import numpy as np
import pytest

from marin_pipelines.cli import main
from marin_pipelines.evals.checkpoint_eval import EvalConfig, evaluate_checkpoint
from marin_pipelines.evals.lm_eval_adapter import JaxLM
from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS_DIR, resolve_task_dir
from marin_pipelines.evals.served import served_lm, serving
from marin_pipelines.tokenize.chat_data import ChatTemplate
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, TokenizerConfig, train_tokenizer
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.train_config import TrainConfig
from marin_pipelines.train.trained_run import load_run
from marin_pipelines.train.trainer import train

LOGLIKELIHOOD = ["marin_python_mc", "marin_python_cloze"]  # scored by log-likelihood, greedy flags too
GREEDY = ["marin_python_qa", "marin_python_signature"]  # generated greedily until a stop
LIMIT = 6


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A small run (random-ish after 3 steps) with a tokenizer of the tasks' kind of text and a context
    that holds their prompts."""
    out = tmp_path_factory.mktemp("served") / "run"
    texts = [line for line in (SHIPPED_TASKS_DIR / "qa.jsonl").read_text().splitlines()] * 2
    tokenizer = train_tokenizer(texts, TokenizerConfig(vocab_size=600))
    model = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), seq_len=256, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
        d_ff=64,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    run = TrainConfig(steps=3, batch_size=4, warmup_steps=1, peak_flops=1e10)
    train(model, run, lambda step: rng.integers(0, model.vocab_size, (4, 257)), out, progress=False)
    tokenizer.save(str(out / TOKENIZER_FILE))
    return out


def samples(lm, tasks: list[str], work: Path, chat: bool = False) -> dict[str, list]:
    """Each task's per-item answers (``resps``) as lm-eval logged them."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    folder = resolve_task_dir(SHIPPED_TASKS_DIR, work / f"tasks-{len(list(work.glob('tasks-*')))}")
    manager = TaskManager(include_path=[str(folder)], include_defaults=False)
    results = simple_evaluate(
        model=lm, tasks=tasks, task_manager=manager, limit=LIMIT, log_samples=True, bootstrap_iters=0,
        apply_chat_template=chat, fewshot_as_multiturn=chat,
    )  # fmt: skip
    return {task: [s["resps"] for s in results["samples"][task]] for task in tasks}


def test_served_and_in_process_agree_item_by_item(run_dir, tmp_path):
    run = load_run(run_dir)
    local = samples(JaxLM(run.model, run.tokenizer, specials=run.specials), LOGLIKELIHOOD + GREEDY, tmp_path)
    with serving(str(run_dir), tmp_path / "serve.log") as (url, name):
        served = samples(
            served_lm(url, name, chat=False, max_length=run.model.config.seq_len),
            LOGLIKELIHOOD + GREEDY,
            tmp_path,
        )
    for task in LOGLIKELIHOOD:
        mine = [[float(answer[0][0]) for answer in item] for item in local[task]]
        theirs = [[float(answer[0][0]) for answer in item] for item in served[task]]
        np.testing.assert_allclose(theirs, mine, rtol=0, atol=1e-4, err_msg=task)
        assert [[a[0][1] for a in item] for item in served[task]] == [
            [a[0][1] for a in item] for item in local[task]
        ]
    for task in GREEDY:
        assert served[task] == local[task], task
        assert any(text[0] for item in local[task] for text in item)  # something was generated


def test_a_served_chat_evaluation_generates_as_in_process(run_dir, tmp_path):
    run = load_run(run_dir)
    chat = ChatTemplate(run.tokenizer, specials=run.specials)
    local = samples(
        JaxLM(run.model, run.tokenizer, chat=chat, specials=run.specials), ["marin_python_qa"], tmp_path, True
    )
    with serving(str(run_dir), tmp_path / "serve.log") as (url, name):
        served = samples(
            served_lm(url, name, chat=True, max_length=run.model.config.seq_len),
            ["marin_python_qa"],
            tmp_path,
            True,
        )
    assert served == local


def test_eval_served_asks_a_served_child_and_says_so(run_dir, tmp_path, capsys):
    out = tmp_path / "results.json"
    args = ["eval", "--checkpoint", str(run_dir), "--tasks", "marin_python_qa", "--limit", "2", "--served"]
    assert main([*args, "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["served"] == {"api": "local-completions"}
    assert "exact_match,strip" in results["results"]["marin_python_qa"]
    assert main([*args, "--out", str(out), "--tokenizer", str(run_dir / TOKENIZER_FILE)]) == 2
    assert "--served asks the run as `serve` serves it" in capsys.readouterr().err
    run = load_run(run_dir)
    chat = EvalConfig(tasks=["marin_python_mc"], limit=2, served=True, chat_tasks=True)
    with pytest.raises(ValueError, match="local-chat-completions, which takes generative tasks only"):
        evaluate_checkpoint(run.model, run.tokenizer, {}, chat, 4, chat_tasks=True, served_run=str(run_dir))
