"""Post-training steps composed in an experiment and materialised through Dagster and the launcher: chat data
(bad lines skipped and counted) -> SFT of the tiny pipeline's run -> evaluations with held-out chat loss ->
a comparison; and a run that cools down on another step's token cache."""

import json

import pytest
from dagster import DagsterInstance
from tiny_pipeline import TRAIN, tiny_run, tiny_tokens

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import Experiment
from marin_pipelines.experiments.defaults import (
    chat_data,
    compare,
    evaluate,
    sft,
    tokenizer_and_cache,
    train,
    variant,
)
from marin_pipelines.steps import StepError
from marin_pipelines.store import ArtifactStore
from marin_pipelines.tokenize.demo_chat import DemoChatConfig, demo_conversations

MODULES = ("json", "heapq", "bisect", "textwrap", "shlex", "base64", "difflib", "fnmatch")
BAD_LINES = ['{"messages": [{"role": "user", "content": "no answer"}]}', "not json at all"]


@pytest.fixture(scope="module")
def evaluated(tiny_store, tmp_path_factory):
    """The tiny run fine-tuned on chat files (with two bad lines), both evaluated on the held-out chats and
    compared; the tiny run again, cooled down for its last 10 steps on a second cache of the same text."""
    files = tmp_path_factory.mktemp("chats")
    sets = demo_conversations(DemoChatConfig(modules=MODULES, heldout_fraction=0.3, train_conversations=60))
    for split, records in sets.items():
        lines = [json.dumps(r) for r in records] + (BAD_LINES if split == "train" else [])
        (files / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    tokens = tiny_tokens()
    base = tiny_run(tokens)  # seq_len 32: too short for a conversation
    long_base = train("tiny_sft/base", tokens, model={"size": "nano", "seq_len": 96}, train=TRAIN)
    chats = chat_data(
        "tiny_sft/chat_data", train=[str(files / "train.jsonl")], heldout=[str(files / "heldout.jsonl")]
    )
    tuned = sft(
        "tiny_sft/sft_checkpoint", long_base, chats, train={"steps": 20, "batch_size": 8, "warmup_steps": 2}
    )
    evals = {
        name: evaluate(f"tiny_sft/eval_{name}", run, batch_size=8, chat={"held": chats})
        for name, run in (("base", long_base), ("sft", tuned))
    }
    second = tokenizer_and_cache(
        "tiny_cool",
        tokens.cache.inputs["curated_text"],
        tokenizer=tokens.tokenizer,
        cache={"validation_fraction": 0.3},
    )
    cooled = variant(
        base,
        "tiny_cool/checkpoint",
        data_mixture={
            "sources": {"main": {"weight": 1.0}, "cool": {"weight": 0.0, "cache": second}},
            "stages": [{"start": 10, "weights": {"main": 1.0, "cool": 3.0}}],
        },
    )
    experiment = Experiment(
        "tiny_sft",
        steps=[compare("tiny_sft/comparison", evals), evaluate("tiny_cool/eval", cooled, batch_size=8)],
    )
    run = materialize_experiment(experiment, tiny_store, DagsterInstance.ephemeral())
    cooling_cache = ArtifactStore(tiny_store).get(list(second.cache.key), second.cache.version)
    return {m.asset: m.metadata for m in run.materialized}, cooling_cache.url


def test_chat_files_are_read_into_the_store_with_bad_lines_counted(evaluated):
    chats = evaluated[0]["tiny_sft/chat_data"]
    assert chats["train_conversations"] > 20 and chats["heldout_conversations"] > 0
    assert chats["train_skipped"] == {"no_assistant_turn": 1, "not_json": 1}


def test_the_sft_step_trains_through_the_launcher_and_compares_with_its_base(evaluated):
    tuned = evaluated[0]["tiny_sft/sft_checkpoint"]
    assert tuned["steps"] == 20 and tuned["resumed_from_step"] == 0 and tuned["mfu"] > 0
    assert tuned["data"]["conversations"] == evaluated[0]["tiny_sft/chat_data"]["train_conversations"]
    assert tuned["data"]["assistant_tokens"] > 0 and not tuned["data"]["cut_off"]
    base_loss, sft_loss = tuned["heldout_chat_loss_base"], tuned["heldout_chat_loss_sft"]
    assert sft_loss < base_loss  # 20 steps on the chat layout, from a model that never saw it
    assert "sft" in tuned["held-out chat loss"]  # the markdown table, shown in the UI


def test_evaluations_report_the_held_out_chat_loss_the_sft_step_measured(evaluated):
    meta = evaluated[0]
    tuned = meta["tiny_sft/sft_checkpoint"]
    for name in ("base", "sft"):
        scores = meta[f"tiny_sft/eval_{name}"]["scores"]
        assert scores["chat/held"] == pytest.approx(tuned[f"heldout_chat_loss_{name}"], rel=1e-3)  # 4 digits
        assert "bpb/main" in scores  # the SFT run measured on its base's pretraining text too
    assert "tiny_sft/comparison" in meta


def test_a_run_cools_down_on_another_steps_cache(evaluated):
    meta, cooling_cache = evaluated
    sources = meta["tiny_cool/checkpoint"]["data_sources"]
    assert sources["cool"] == cooling_cache != sources["main"]
    assert {"bpb/main", "bpb/cool"} <= set(meta["tiny_cool/eval"]["scores"])


def test_sft_needs_a_training_step_and_chat_data():
    tokens = tiny_tokens()
    base = tiny_run(tokens)
    with pytest.raises(StepError, match="base must be a training step and chat a chat_data step"):
        sft("x/sft", base, tokens.cache)
    with pytest.raises(StepError, match=r"chat\['held'\] must be a chat_data step"):
        evaluate("x/eval", base, chat={"held": tokens.cache})
