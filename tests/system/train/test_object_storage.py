"""Training on object storage (a real Cloud Storage server, the emulator): the data is an artifact on the
bucket, the work folder is a gs:// URL; a run SIGKILLed there resumes there and ends bit-identical, and the
checkpoint is inspected and exported from the bucket."""

import json
import os
import shutil
import signal
import subprocess
import time

import fsspec
import yaml
from test_train_cli import run_config, train_command
from upath import UPath

from marin_pipelines.cli import main
from marin_pipelines.store import ArtifactStore
from marin_pipelines.train.checkpoint import load_params, params_sha256

STEPS = 30
CONFIG = run_config("micro", STEPS, warmup_steps=3, checkpoint_every=5, log_every=10)


def saved_steps(url: str) -> list[int]:
    """Steps orbax has committed in a work folder on a bucket (``commit_success.txt`` goes last into each
    step there: no renames on object storage); every listing asks the bucket (marin_pipelines/__init__.py)."""
    fs, root = fsspec.core.url_to_fs(f"{url}/checkpoints")
    return sorted(int(path.split("/")[-2]) for path in fs.glob(f"{root}/*/commit_success.txt"))


def losses(folder: UPath) -> list[float]:
    return [json.loads(line)["loss"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_a_run_killed_on_a_bucket_resumes_there_bit_identically(token_cache, gcs_root, tmp_path, capsys):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(CONFIG))
    store = ArtifactStore(gcs_root)
    with store.write(["tokenized_cache"], "v1") as pending:
        shutil.copytree(token_cache, pending.path, dirs_exist_ok=True)
    data = store.url(["tokenized_cache"], "v1")
    # the emulator's address is in os.environ now; the child keeps its copy of the data in MARIN_CACHE_DIR
    env = {
        **os.environ,
        "WANDB_MODE": "disabled",
        "JAX_PLATFORMS": "cpu",
        "MARIN_CACHE_DIR": str(tmp_path / "c"),
    }
    local, remote = tmp_path / "local", f"{gcs_root}/run"
    subprocess.run(train_command(config_file, token_cache, local), env=env, check=True, capture_output=True)

    log = tmp_path / "killed.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            train_command(config_file, data, remote), env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
        while not saved_steps(remote) and process.poll() is None:
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL, log.read_text()[-3000:]
    interrupted_at = saved_steps(remote)[-1]
    assert 0 < interrupted_at < STEPS, "the kill came too late to test anything"

    done = subprocess.run(train_command(config_file, data, remote), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(UPath(remote, "train.json").read_text())["summary"]
    assert summary["resumed_from_step"] >= interrupted_at
    assert params_sha256(load_params(remote)[1]) == params_sha256(load_params(local)[1])

    # what an operator does next, on the bucket: inspect the checkpoint, export it
    capsys.readouterr()
    assert main(["checkpoint-info", remote]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["step"] == STEPS and info["sha256"] == params_sha256(load_params(local)[1])
    assert main(["export-hf", remote, "--out", f"{gcs_root}/hf"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported == json.loads(UPath(gcs_root, "hf", "config.json").read_text())
    assert UPath(gcs_root, "hf", "model.safetensors").stat().st_size > 0
    assert main(["export-hf", remote, "--out", f"{gcs_root}/hf/"]) == 0  # its own earlier export: replaced
    capsys.readouterr()
    assert losses(UPath(remote)) == losses(UPath(local))
    assert UPath(remote, "tokenizer.json").read_bytes() == (token_cache / "tokenizer.json").read_bytes()
    assert UPath(remote, "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "c" / "store").is_dir()  # the data was read from a local copy
