"""Supervised fine-tuning from a base run: the held-out chat loss falls well below the base's, and a run
stopped part-way (or SIGKILLed) and resumed ends with exactly the parameters of one that was not."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from marin_pipelines.evals.chat_loss import chat_loss
from marin_pipelines.tokenize.chat_data import ChatTemplate
from marin_pipelines.tokenize.demo_chat import HELDOUT_FILE, TRAIN_FILE, DemoChatConfig, build_demo_chat
from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, TokenizerConfig, train_tokenizer
from marin_pipelines.train.checkpoint import load_checkpoint, load_params, params_sha256
from marin_pipelines.train.model import LlamaConfig
from marin_pipelines.train.sft import HELDOUT_FILE as HELDOUT_LOSSES
from marin_pipelines.train.sft import SFT_DATA_FILE, sft
from marin_pipelines.train.train_config import CHAT_TEMPLATE_FILE, TrainConfig
from marin_pipelines.train.trainer import train

SFT = TrainConfig(steps=100, batch_size=8, learning_rate=3e-3, warmup_steps=10, checkpoint_every=50, seed=1)


@pytest.fixture(scope="module")
def sft_base(tmp_path_factory):
    """The demo's chat set, and a tiny base model pretrained on the plain text of its training
    conversations (no chat layout, no held-out module)."""
    folder = tmp_path_factory.mktemp("sft")
    build_demo_chat(folder / "chat", DemoChatConfig())
    records = [json.loads(line) for line in (folder / "chat" / TRAIN_FILE).read_text().splitlines()]
    texts = [m["content"] for r in records for m in r["messages"]]
    tokenizer = train_tokenizer(texts * 3, TokenizerConfig(vocab_size=1000))
    run = folder / "base"
    run.mkdir()
    tokenizer.save(str(run / TOKENIZER_FILE))
    stream = np.asarray(tokenizer.encode(" ".join(texts)).ids, np.int32)
    model = LlamaConfig(
        vocab_size=1000, seq_len=96, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128
    )
    windows = len(stream) // 97 - 1

    def batches(step: int) -> np.ndarray:
        return np.stack([stream[((step * 8 + i) % windows) * 97 :][:97] for i in range(8)])

    train(model, TrainConfig(steps=150, batch_size=8, warmup_steps=10), batches, run, progress=False)
    return folder


def test_sft_lowers_the_held_out_chat_loss_well_below_the_base(sft_base):
    out = sft_base / "tuned"
    summary = sft(sft_base / "base", [sft_base / "chat" / TRAIN_FILE], out, SFT, progress=False)
    assert summary["data"]["conversations"] == 400 and not summary["data"]["skipped"]
    assert json.loads((out / SFT_DATA_FILE).read_text()) == summary["data"]
    assert (out / CHAT_TEMPLATE_FILE).is_file() and (out / TOKENIZER_FILE).is_file()
    heldout = [sft_base / "chat" / HELDOUT_FILE]
    losses = {}
    template = ChatTemplate(Tokenizer.from_file(str(sft_base / "base" / TOKENIZER_FILE)))
    for name in ("base", "tuned"):
        model, _ = load_checkpoint(sft_base / name)
        losses[name] = chat_loss(model, template, heldout, batch_size=8)["loss"]
    assert losses["tuned"] < 0.9 * losses["base"], losses  # measured: 4.62 -> 3.85 nats per assistant token


def test_a_resumed_sft_run_ends_bit_identical(sft_base):
    data = [sft_base / "chat" / TRAIN_FILE]
    short = SFT.model_copy(update={"steps": 8, "checkpoint_every": 4})
    sft(sft_base / "base", data, sft_base / "whole", short, progress=False)
    sft(sft_base / "base", data, sft_base / "parts", short.model_copy(update={"steps": 4}), progress=False)
    resumed = sft(sft_base / "base", data, sft_base / "parts", short, progress=False)
    assert resumed["resumed_from_step"] == 4
    assert params_sha256(load_params(sft_base / "parts")[1]) == params_sha256(
        load_params(sft_base / "whole")[1]
    )


def test_the_command_fine_tunes_and_compares_on_held_out_chat(sft_base, tmp_path, capsys):
    from marin_pipelines.cli import main

    config = tmp_path / "sft.yaml"
    config.write_text("train:\n  batch_size: 8\n  learning_rate: 0.003\n  checkpoint_every: 10\n")
    args = ["sft", "--base", str(sft_base / "base"), "--data", str(sft_base / "chat" / TRAIN_FILE), "--quiet"]
    heldout = ["--heldout", str(sft_base / "chat" / HELDOUT_FILE)]
    assert (
        main([*args, "--out", str(tmp_path / "run"), "--config", str(config), "--steps", "20", *heldout]) == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 20 and summary["data"]["conversations"] == 400
    losses = summary["heldout_chat_loss"]
    assert set(losses) == {"base", "sft", "assistant_tokens"} and losses["assistant_tokens"] > 0
    assert json.loads((tmp_path / "run" / HELDOUT_LOSSES).read_text()) == losses  # what the sft step reads
    config.write_text("train:\n  learning_rate: -1\n")
    assert main([*args, "--out", str(tmp_path / "bad"), "--config", str(config)]) == 2
    assert "learning_rate" in capsys.readouterr().err


def test_sigkill_mid_sft_then_the_same_command_ends_bit_identical(sft_base, tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text("train:\n  steps: 80\n  batch_size: 8\n  checkpoint_every: 10\n  keep_last: 2\n")
    cli = str(Path(sys.executable).parent / "marin-pipelines")
    env = {**os.environ, "WANDB_MODE": "disabled", "JAX_PLATFORMS": "cpu"}

    def command(out: Path) -> list[str]:
        data = str(sft_base / "chat" / TRAIN_FILE)
        return [
            cli,
            "sft",
            "--base",
            str(sft_base / "base"),
            "--data",
            data,
            "--out",
            str(out),
            "--config",
            str(config),
            "--quiet",
        ]

    def saved(out: Path) -> list[int]:
        folder = out / "checkpoints"
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []

    subprocess.run(command(tmp_path / "full"), env=env, check=True, capture_output=True)
    process = subprocess.Popen(
        command(tmp_path / "killed"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    while len(saved(tmp_path / "killed")) < 2 and process.poll() is None:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    interrupted_at = saved(tmp_path / "killed")[-1]
    assert 0 < interrupted_at < 80, "the kill came too late to test anything"
    done = subprocess.run(command(tmp_path / "killed"), env=env, check=True, capture_output=True, text=True)
    assert json.loads(done.stdout.strip().splitlines()[-1])["resumed_from_step"] >= interrupted_at
    full, killed = (load_params(tmp_path / name) for name in ("full", "killed"))
    assert full[3] == killed[3] == 80 and params_sha256(full[1]) == params_sha256(killed[1])


def test_chat_data_with_no_assistant_token_within_the_sequence_is_a_clear_error(sft_base, tmp_path):
    long_prompt = {"role": "system", "content": "You answer briefly. " * 60}
    record = {
        "messages": [long_prompt, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi"}]
    }
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match="no assistant token within the base's seq_len 96.*1 cut off"):
        sft(sft_base / "base", [data], tmp_path / "run", SFT, progress=False)


def test_unreadable_chat_files_are_blamed_on_their_lines_not_on_seq_len(sft_base, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"messages": oops\n{"no": "messages"}\n')
    with pytest.raises(ValueError, match="no conversation could be read from .*bad.jsonl.*not_json"):
        sft(sft_base / "base", [data], tmp_path / "run", SFT, progress=False)
    assert not (tmp_path / "run").exists()


def test_most_conversations_cut_is_a_warning_and_no_scored_token_is_null_not_nan(sft_base, tmp_path, capsys):
    from marin_pipelines.cli import main

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    long = {"role": "system", "content": "You answer briefly. " * 60}
    short = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]
    mixed, heldout = tmp_path / "mixed.jsonl", tmp_path / "heldout.jsonl"
    mixed.write_text(
        "".join(json.dumps({"messages": m}) + "\n" for m in ([long, *short], [long, *short], short))
    )
    heldout.write_text(json.dumps({"messages": [long, *short]}) + "\n")
    base, out = str(sft_base / "base"), str(tmp_path / "run")
    config = tmp_path / "sft.yaml"
    config.write_text("train:\n  warmup_steps: 1\n")
    args = [
        "sft",
        "--base",
        base,
        "--data",
        str(mixed),
        "--out",
        out,
        "--steps",
        "2",
        "--config",
        str(config),
    ]
    assert main([*args, "--heldout", str(heldout)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1], parse_constant=refuse)
    assert summary["data"]["cut_off"] == 2 and "2 of 3 conversations" in summary["data"]["warnings"][0]
    assert (
        json.loads((tmp_path / "run" / SFT_DATA_FILE).read_text())["warnings"] == summary["data"]["warnings"]
    )
    losses = summary["heldout_chat_loss"]
    assert losses["base"] is None and losses["sft"] is None and "seq_len 96" in losses["no_loss"]

    # the run is made from these files: a rerun on others is refused, and the run left as it was
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()}
    other = str(sft_base / "chat" / TRAIN_FILE)
    assert main([*args[:4], other, *args[5:]]) == 2
    error = capsys.readouterr().err
    assert "data: made from" in error and "mixed.jsonl" in error and other in error
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir() if p.is_file()} == before
