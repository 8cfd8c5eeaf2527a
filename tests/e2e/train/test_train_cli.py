"""The `train` and `checkpoint-info` commands, resume after a real SIGKILL, and the local launcher."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from dagster import AssetExecutionContext, MaterializeResult, asset, materialize

from marin_pipelines.cli import main
from marin_pipelines.resources.launcher import LocalLauncher
from marin_pipelines.train.launch_config import TrainLaunch
from marin_pipelines.train.run_config import RunConfig


def run_config(size: str, steps: int, warmup_steps: int, checkpoint_every: int, log_every: int) -> dict:
    """A tiny run for the tests: a few checkpoints, the last two kept."""
    train = {"steps": steps, "batch_size": 8, "warmup_steps": warmup_steps, "keep_last": 2}
    train |= {"checkpoint_every": checkpoint_every, "log_every": log_every, "peak_flops": 1e10}
    return {"model": {"size": size, "seq_len": 32}, "train": train}


CONFIG = run_config("nano", steps=120, warmup_steps=10, checkpoint_every=10, log_every=50)
# what the SIGKILL test trains: a mixture of experts stepped by Muon (dense AdamW resumes are the unit tests')
MOE_MUON = {
    "model": {**CONFIG["model"], "moe": {"experts": 4, "top_k": 2}},
    "train": {**CONFIG["train"], "optimizer": "muon", "steps": 40},
}
ENV = {**os.environ, "WANDB_MODE": "disabled", "JAX_PLATFORMS": "cpu"}


def train_command(config_file, cache, out) -> list[str]:
    return [
        sys.executable,
        "-m",
        "marin_pipelines.cli",
        "train",
        "--quiet",
        "--config",
        str(config_file),
        "--data",
        str(cache),
        "--out",
        str(out),
    ]


def checkpoint_info(directory, capsys) -> dict:
    assert main(["checkpoint-info", str(directory)]) == 0
    return json.loads(capsys.readouterr().out)


def saved_steps(out) -> list[int]:
    folder = out / "checkpoints"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def test_sigkill_then_the_same_command_ends_bit_identical(token_cache, tmp_path, capsys):
    """An MoE + Muon run killed between checkpoints ends, rerun, with the uninterrupted run's parameters."""
    config_file = tmp_path / "moe_muon.yaml"
    config_file.write_text(yaml.safe_dump(MOE_MUON))
    full, killed = tmp_path / "full", tmp_path / "killed"
    subprocess.run(train_command(config_file, token_cache, full), env=ENV, check=True, capture_output=True)

    process = subprocess.Popen(
        train_command(config_file, token_cache, killed),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while len(saved_steps(killed)) < 2 and process.poll() is None:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    interrupted_at = saved_steps(killed)[-1]
    assert 0 < interrupted_at < MOE_MUON["train"]["steps"], "the kill came too late to test anything"

    subprocess.run(train_command(config_file, token_cache, killed), env=ENV, check=True, capture_output=True)
    summary = json.loads((killed / "train.json").read_text())["summary"]
    assert summary["resumed_from_step"] >= interrupted_at
    reference, resumed = checkpoint_info(full, capsys), checkpoint_info(killed, capsys)
    assert reference["step"] == resumed["step"] == MOE_MUON["train"]["steps"]
    assert reference["sha256"] == resumed["sha256"]
    assert reference["params"] == resumed["params"] == summary["params"]
    assert resumed["active_params"] == summary["active_params"] < resumed["params"]  # top 2 of 4 experts
    assert resumed["model"]["moe"]["experts"] == 4 and summary["flops_per_token"] > 0
    assert resumed["checkpoints"] == [30, 40]
    metrics = [json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 40 and all("moe_load_max_over_mean" in m for m in metrics)


def test_warm_start_adds_qk_norm_to_a_finished_run_and_records_its_base(
    config_file, token_cache, tmp_path, capsys
):
    short = {**CONFIG, "train": {**CONFIG["train"], "steps": 6, "warmup_steps": 1, "checkpoint_every": 6}}
    base_config, qk_config = tmp_path / "base.yaml", tmp_path / "qk.yaml"
    base_config.write_text(yaml.safe_dump(short))
    qk_config.write_text(yaml.safe_dump({**short, "model": {**short["model"], "qk_norm": True}}))
    data = ["--data", str(token_cache), "--quiet"]
    assert main(["train", "--config", str(base_config), *data, "--out", str(tmp_path / "base")]) == 0
    warm = ["train", "--config", str(qk_config), *data, "--out", str(tmp_path / "qk")]
    assert main([*warm, "--warm-start", str(tmp_path / "base")]) == 0
    capsys.readouterr()
    record = json.loads((tmp_path / "qk" / "train.json").read_text())["summary"]["warm_start"]
    assert record["dir"] == str(tmp_path / "base") and record["step"] == 6
    assert record["params_sha256"] == checkpoint_info(tmp_path / "base", capsys)["sha256"]
    assert record["new"] == [f"blocks.{i}.attn.{n}.scale" for i in range(4) for n in ("k_norm", "q_norm")]
    assert record["dropped"] == [] and record["optimizer"]["loaded"] > 0
    capsys.readouterr()
    # the run folder was made from that base: another one (here the run itself) is refused, naming it
    assert main([*warm, "--warm-start", str(tmp_path / "qk")]) == 2
    assert "warm_start" in capsys.readouterr().err
    assert main([*warm, "--fresh-optimizer"]) == 2
    assert "--fresh-optimizer is for a --warm-start run" in capsys.readouterr().err


def test_train_command_errors_name_the_field(config_file, token_cache, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"model": {"size": "nano", "seq_len": 32}, "train": {"stepz": 3}}))
    assert (
        main(["train", "--config", str(bad), "--data", str(token_cache), "--out", str(tmp_path / "o")]) == 2
    )
    assert "train.stepz" in capsys.readouterr().err
    args = [
        "train",
        "--config",
        str(config_file),
        "--data",
        str(tmp_path / "nope"),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(args) == 2
    assert "not a token cache" in capsys.readouterr().err or "nope" in capsys.readouterr().err
    assert main(["checkpoint-info", str(tmp_path)]) == 2
    assert "not a training directory" in capsys.readouterr().err


def test_local_launcher_streams_metrics_through_pipes(token_cache, tmp_path):
    steps = 12
    train = {"steps": steps, "batch_size": 8, "warmup_steps": 2, "log_every": 4, "peak_flops": 1e10}
    run = RunConfig(model={"size": "nano", "seq_len": 32}, train=train)
    launch = TrainLaunch(run=run, data=str(token_cache), out=str(tmp_path / "out"))
    messages = []

    @asset
    def trained(context: AssetExecutionContext) -> MaterializeResult:
        launcher = LocalLauncher(env={"WANDB_MODE": "disabled"})
        messages.extend(launcher.train(context, launch))
        return MaterializeResult(metadata={"reported": len(messages)})

    assert materialize([trained]).success
    assert [m["step"] for m in messages] == [0, 4, 8]
    assert all({"loss", "grad_norm", "lr", "tokens_per_s", "mfu", "skipped"} <= m.keys() for m in messages)
    assert (tmp_path / "out" / "train.json").is_file()
    assert TrainLaunch.read(launch.file) == launch  # the one file the child ran on, beside its run


def test_export_hf_writes_a_folder_that_loads_on_its_own(config_file, token_cache, tmp_path, capsys):
    short = tmp_path / "short.yaml"
    short.write_text(yaml.safe_dump({**CONFIG, "train": {**CONFIG["train"], "steps": 3, "warmup_steps": 1}}))
    run, hf = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "--config", str(short), "--data", str(token_cache), "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["export-hf", str(run), "--out", str(hf)]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config == json.loads((hf / "config.json").read_text())
    assert config["architectures"][0].endswith("ForCausalLM") and (hf / "model.safetensors").stat().st_size
    assert (hf / "tokenizer.json").read_bytes() == (token_cache / "tokenizer.json").read_bytes()
    assert main(["export-hf", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "not a training directory" in capsys.readouterr().err
