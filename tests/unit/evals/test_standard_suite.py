"""The standard suite read from a run folder's own records: a chat model's path."""

from __future__ import annotations

import json
from pathlib import Path

from marin_pipelines.evals.lm_eval_tasks import SHIPPED_TASKS
from marin_pipelines.evals.standard_suite import STANDARD_TASKS, standard_suite, too_long
from marin_pipelines.tokenize.demo_chat import DemoChatConfig, build_demo_chat


def write_run(folder: Path, seq_len: int, inputs: dict, chat: bool = False) -> str:
    folder.mkdir(parents=True)
    (folder / "model.json").write_text(json.dumps({"seq_len": seq_len}))
    (folder / "inputs.json").write_text(json.dumps(inputs))
    if chat:
        (folder / "sft_launch.json").write_text("{}")
    return str(folder)


def test_every_shipped_task_is_in_the_suite_unless_its_answers_do_not_fit():
    assert set(STANDARD_TASKS) == set(SHIPPED_TASKS)  # marin_python_signature included
    assert too_long("marin_python_signature", 128) is None  # 24 tokens: fits the demo's models
    assert "24 tokens" in too_long("marin_python_signature", 16)


def test_a_chat_model_is_asked_through_its_template_with_its_held_out_chats_and_its_bases_caches(
    tmp_path, token_cache
):
    chats = tmp_path / "chat_data"
    build_demo_chat(chats, DemoChatConfig(modules=("json",), train_conversations=5, heldout_fraction=0.5))
    base = write_run(tmp_path / "base", 128, {"data": {"identity": "c", "from": str(token_cache)}})
    tuned = write_run(
        tmp_path / "sft",
        24,  # a short context: the generative tasks whose answers do not fit are left out, and said
        {
            "base": {"identity": "b", "from": base},
            "data": {"identity": "d", "from": [f"{chats}/train.jsonl"]},
        },
        chat=True,
    )
    bpb, config, left_out = standard_suite(tuned)
    assert bpb == {"main": [str(token_cache)]}  # the base's cache: the fine-tune trained on chats
    assert config.chat_tasks and config.chat == {"chat": [f"{chats}/heldout.jsonl"]}
    assert set(left_out) == {"marin_python_signature", "marin_python_doc"} and "24 tokens" in str(left_out)
    assert config.tasks == [t for t in STANDARD_TASKS if t not in left_out]
