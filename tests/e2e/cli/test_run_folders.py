"""A run folder made by `train` is never silently corrupted: a rerun on other data or for fewer steps is
refused before anything in it changes, a warm start from a base on another tokenizer is refused unless it is
meant, two commands on one folder make one run, and an output that cannot be written is one line naming it,
before any work."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from marin_pipelines.cli import main
from marin_pipelines.tokenize.tokenized_cache import CacheConfig, build_cache
from marin_pipelines.tokenize.tokenizer import TokenizerConfig, train_tokenizer
from marin_pipelines.train.run_inputs import INPUTS_FILE

RUN = {
    "model": {"size": "nano", "seq_len": 32},
    "train": {"steps": 6, "batch_size": 8, "warmup_steps": 1, "checkpoint_every": 3, "peak_flops": 1e10},
}
ENV = {**os.environ, "WANDB_MODE": "disabled", "JAX_PLATFORMS": "cpu"}


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("run_config") / "run.yaml"
    path.write_text(yaml.safe_dump(RUN))
    return path


@pytest.fixture(scope="module")
def other_cache(token_cache, tmp_path_factory) -> Path:
    """The token cache's documents under another tokenizer of the same vocabulary size: other data to a run
    made from the first, and a model of the same shape."""
    rng = np.random.default_rng(1)
    words = ["north", "south", "river", "stone", "lamp", "field", "cloud", "paper", "garden", "winter"]
    texts = [" ".join(rng.choice(words, size=40)) for _ in range(200)]
    tokenizer = train_tokenizer(texts, TokenizerConfig(vocab_size=300))
    assert tokenizer.get_vocab_size() == json.loads((token_cache / "cache.json").read_text())["vocab_size"]
    folder = tmp_path_factory.mktemp("other_cache")
    (folder / "cache").mkdir()
    build_cache(
        [str(token_cache.parent / "docs")], tokenizer, folder / "cache", CacheConfig(), folder / "work"
    )
    return folder / "cache"


@pytest.fixture(scope="module")
def finished_run(config_file, token_cache, tmp_path_factory) -> Path:
    """A run of RUN's steps on the token cache, finished; tests that write into it use a copy."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(train_args(config_file, token_cache, out)) == 0
    return out


def train_args(config_file: Path, data: Path, out: Path) -> list[str]:
    return ["train", "--quiet", "--config", str(config_file), "--data", str(data), "--out", str(out)]


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_rerun_on_other_data_is_refused_and_leaves_the_run_as_it_was(
    config_file, token_cache, other_cache, tmp_path, capsys
):
    out = tmp_path / "run"
    (out / "unrelated").mkdir(parents=True)  # a folder made beforehand is fine
    assert main(train_args(config_file, token_cache, out)) == 0
    recorded = json.loads((out / INPUTS_FILE).read_text())
    assert recorded["data"]["from"] == str(token_cache) and set(recorded) == {"data", "tokenizer"}
    before = files(out)
    capsys.readouterr()

    assert main(train_args(config_file, other_cache, out)) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.startswith("marin-pipelines: error:")
    assert str(token_cache) in error and str(other_cache) in error and "data: made from" in error
    assert "tokenizer: made from" in error
    assert files(out) == before  # the tokenizer above all: the same parameters would read other tokens

    assert main(train_args(config_file, token_cache, out)) == 0  # the same data: resumed (here: done)
    assert json.loads(capsys.readouterr().out)["resumed_from_step"] == RUN["train"]["steps"]


def test_fewer_steps_than_the_run_has_are_refused_and_the_record_stays_the_checkpoints(
    config_file, token_cache, finished_run, tmp_path, capsys
):
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    before = files(out)
    capsys.readouterr()
    assert main([*train_args(config_file, token_cache, out), "--steps", "3"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"{out} is a run at step 6, past the 3 steps asked" in error
    assert "a fresh --out for a new run of 3 steps" in error
    assert files(out) == before  # train.json still says 6 steps, their tokens and FLOPs


def test_a_warm_start_from_another_tokenizer_is_refused_unless_it_is_meant(
    config_file, token_cache, other_cache, finished_run, tmp_path, capsys
):
    out = tmp_path / "warm"
    warm = [*train_args(config_file, other_cache, out), "--warm-start", str(finished_run), "--steps", "2"]
    capsys.readouterr()
    assert main(warm) == 2
    error = capsys.readouterr().err.strip()
    base_tokenizer, run_tokenizer = f"{finished_run}/tokenizer.json", f"{other_cache}/tokenizer.json"
    assert len(error.splitlines()) == 1 and base_tokenizer in error and run_tokenizer in error
    assert "--allow-other-tokenizer" in error
    assert not any(out.iterdir())  # nothing recorded: the corrected command starts afresh

    assert main([*warm, "--allow-other-tokenizer"]) == 0
    record = json.loads((out / "train.json").read_text())["summary"]["warm_start"]
    assert record["other_tokenizer"]["base"]["from"] == base_tokenizer
    assert record["other_tokenizer"]["run"]["from"] == run_tokenizer
    assert record["other_tokenizer"]["base"]["identity"] != record["other_tokenizer"]["run"]["identity"]
    capsys.readouterr()
    assert main([*train_args(config_file, token_cache, tmp_path / "x"), "--allow-other-tokenizer"]) == 2
    assert "--allow-other-tokenizer is for a --warm-start run" in capsys.readouterr().err


def test_two_commands_on_one_folder_make_one_run(config_file, token_cache, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "marin_pipelines.cli", *train_args(config_file, token_cache, out)]
    first, second = (
        subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    )
    said = [process.communicate() for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], [err[-2000:] for _, err in said]
    summaries = [json.loads(out_text) for out_text, _ in said]
    # one trained, the other waited for it and found the run finished
    assert sorted(s["resumed_from_step"] for s in summaries) == [0, RUN["train"]["steps"]]
    assert sum("waiting for the run building it" in err for _, err in said) == 1
    assert summaries[0]["final_loss"] == summaries[1]["final_loss"]
    metrics = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == list(range(RUN["train"]["steps"]))
    assert not list(tmp_path.glob(".*.lease"))


def test_outputs_that_cannot_be_written_are_one_line_before_any_work(
    config_file, token_cache, tmp_path, capsys
):
    def error_of(args: list[str]) -> str:
        assert main(args) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("marin-pipelines: error:"), lines
        return lines[0]

    a_file = tmp_path / "a_file"
    a_file.write_text("not a run")
    assert f"--out {a_file} is a file" in error_of(train_args(config_file, token_cache, a_file))
    assert "is a file, not a folder" in error_of(train_args(config_file, token_cache, a_file / "run"))

    folder = tmp_path / "results"
    folder.mkdir()
    bpb = ["--bpb", "held", str(token_cache)]
    evaluation = ["eval", "--checkpoint", str(tmp_path / "none"), *bpb, "--out", str(folder)]
    assert f"--out {folder} is a folder" in error_of(evaluation)  # before the checkpoint is even looked at

    locked = tmp_path / "locked"
    locked.mkdir()
    with read_only(locked):
        said = error_of(train_args(config_file, token_cache, locked / "run"))
        assert str(locked / "run") in said and ("not allowed" in said or "read-only" in said)
    assert not any(locked.iterdir())


class read_only:
    """``folder`` unwritable for the block: its mode, and for root (whom modes do not stop) the immutable
    attribute; skipped where neither holds."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __enter__(self) -> None:
        self.folder.chmod(0o555)
        self.immutable = os.geteuid() == 0 and shutil.which("chattr") is not None
        if self.immutable:
            subprocess.run(["chattr", "+i", str(self.folder)], check=True)
        probe = self.folder / "probe"
        try:
            probe.write_text("")
        except OSError:
            return
        probe.unlink()
        self.__exit__()
        pytest.skip(f"cannot make {self.folder} read-only here")

    def __exit__(self, *exc: object) -> None:
        if self.immutable:
            subprocess.run(["chattr", "-i", str(self.folder)], check=True)
        self.folder.chmod(0o755)


def test_a_full_disk_or_too_little_memory_is_one_line_and_a_rerun_finishes(
    config_file, token_cache, tmp_path, capsys
):
    def limited(kilobytes: int, *args: str) -> subprocess.CompletedProcess:
        """The command with its files limited to ``kilobytes`` (``ulimit -f``): a disk that fills up."""
        command = f'ulimit -f {kilobytes} && exec "{sys.executable}" -m marin_pipelines.cli "$@"'
        return subprocess.run(["bash", "-c", command, "-", *args], env=ENV, capture_output=True, text=True)

    out = tmp_path / "run"
    full = limited(100, *train_args(config_file, token_cache, out))  # the first checkpoint does not fit
    assert full.returncode == 2 and full.stderr.count("\n") == 1, full.stderr[-3000:]
    assert "no space left" in full.stderr and str(out / "checkpoints") in full.stderr
    assert main(train_args(config_file, token_cache, out)) == 0  # nothing half-written was trusted
    assert json.loads(capsys.readouterr().out)["resumed_from_step"] == 0

    cache = tmp_path / "cache"
    docs = str(token_cache.parent / "docs")
    full = limited(8, "tokenize", "--input", docs, "--out", str(cache), "--vocab-size", "300")
    assert full.returncode == 2 and full.stderr.count("\n") == 1, full.stderr[-3000:]
    assert "no space left" in full.stderr and str(cache) in full.stderr and not cache.exists()

    huge = tmp_path / "huge.yaml"
    # terabytes of activations: XLA refuses at once (a smaller excess would be the kernel's OOM killer's)
    model = {"size": "nano", "seq_len": 4096}
    huge.write_text(yaml.safe_dump({"model": model, "train": {**RUN["train"], "batch_size": 40_000}}))
    command = [sys.executable, "-m", "marin_pipelines.cli", *train_args(huge, token_cache, tmp_path / "huge")]
    oom = subprocess.run(command, env=ENV, capture_output=True, text=True)
    assert oom.returncode == 2 and oom.stderr.count("\n") == 1, oom.stderr[-3000:]
    assert "does not fit in the device's memory" in oom.stderr


def test_a_config_error_records_nothing_and_the_corrected_rerun_runs(config_file, token_cache, tmp_path):
    """A mesh this machine cannot make is refused before the folder records its inputs (it recorded them,
    then failed inside the trainer)."""
    impossible = tmp_path / "impossible.yaml"
    impossible.write_text(yaml.safe_dump({**RUN, "train": {**RUN["train"], "mesh": {"model": 2}}}))
    out = tmp_path / "run"
    assert main(train_args(impossible, token_cache, out)) == 2
    assert not (out / INPUTS_FILE).exists() and not (out / "tokenizer.json").exists()
    assert main(train_args(config_file, token_cache, out)) == 0
