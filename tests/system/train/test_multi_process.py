"""A run over two processes (real jax.distributed: CPU devices, gloo collectives): reproducible, equal to
one process with two devices, resumed bit-identically after one of its processes is SIGKILLed, and resumed
by one process."""

import json
import shutil
import signal
import subprocess
import time
from itertools import pairwise

import numpy as np
import psutil
import pytest
import yaml
from test_train_cli import ENV, run_config, saved_steps, train_command

from marin_pipelines.tokenize.data_mixture import MixtureConfig, MixtureLoader, MixtureSource
from marin_pipelines.train.checkpoint import load_params, params_sha256
from marin_pipelines.train.distributed import ProcessGroup, local_env, process_group

STEPS = 20
CONFIG = run_config("micro", STEPS, warmup_steps=2, checkpoint_every=4, log_every=10)


def group_command(config_file, cache, out, processes: int, devices: int = 1) -> list[str]:
    command = train_command(config_file, cache, out)
    return [*command, "--num-processes", str(processes), "--devices-per-process", str(devices)]


def train_group(config_file, cache, out, processes: int, devices: int = 1) -> dict:
    done = subprocess.run(
        group_command(config_file, cache, out, processes, devices), env=ENV, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "train.json").read_text())["summary"]


def final_sha256(out) -> str:
    return params_sha256(load_params(out)[1])


def losses(out) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "run.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


@pytest.fixture(scope="module")
def two_processes(config_file, token_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("two") / "run"
    return out, train_group(config_file, token_cache, out, processes=2)


def test_the_environment_contract_names_the_bad_variable():
    assert process_group({}) is None and process_group({"MARIN_NUM_PROCESSES": "1"}) is None
    env = {"MARIN_NUM_PROCESSES": "4", "MARIN_PROCESS_ID": "3", "MARIN_COORDINATOR_ADDRESS": "host-0:8476"}
    assert process_group(env) == ProcessGroup(4, 3, "host-0:8476")
    for update, message in [
        ({"MARIN_NUM_PROCESSES": "two"}, "MARIN_NUM_PROCESSES must be an integer"),
        ({"MARIN_PROCESS_ID": "4"}, r"MARIN_PROCESS_ID must be in 0..3"),
        ({"MARIN_COORDINATOR_ADDRESS": "host-0"}, "MARIN_COORDINATOR_ADDRESS must be host:port"),
    ]:
        with pytest.raises(ValueError, match=message):
            process_group({**env, **update})
    with pytest.raises(ValueError, match="MARIN_PROCESS_ID is not set"):
        process_group({"MARIN_NUM_PROCESSES": "2"})
    local = local_env(ProcessGroup(2, 1, "127.0.0.1:1"), 3, {"XLA_FLAGS": "--xla_cpu_foo=1"})
    assert local["XLA_FLAGS"] == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=3"
    assert local["MARIN_PROCESS_ID"] == "1" and local["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"


def test_each_process_reads_only_its_rows_of_the_global_batch(token_cache):
    """Rows computed alone, in any split, are the rows of the whole batch: across sources too."""
    config = MixtureConfig(sources={"a": MixtureSource(weight=3), "b": MixtureSource(weight=1)})
    loader = MixtureLoader.from_config(config, str(token_cache), seq_len=16, batch_size=8, seed=1)
    for step in (0, 41):
        whole = loader.batch(step)
        for cuts in ([0, 4, 8], [0, 1, 6, 7, 8], [0, 8]):
            parts = [loader.rows(step, low, high) for low, high in pairwise(cuts)]
            np.testing.assert_array_equal(np.concatenate(parts), whole)
    with pytest.raises(ValueError, match="rows 6:9 are outside a batch of 8"):
        loader.rows(0, 6, 9)


def test_two_processes_match_one_process_with_two_devices(two_processes, config_file, token_cache, tmp_path):
    one = train_group(config_file, token_cache, tmp_path / "one", processes=1, devices=2)
    assert one["processes"] == 1 and one["devices"] == 2
    assert two_processes[1]["processes"] == 2 and two_processes[1]["devices"] == 2
    assert two_processes[1]["final_loss"] == pytest.approx(one["final_loss"], rel=1e-4)


def test_sigkill_of_one_process_fails_the_group_and_a_restart_resumes_bit_identically(
    two_processes, config_file, token_cache, tmp_path
):
    killed, log = tmp_path / "killed", tmp_path / "launcher.log"
    with log.open("w") as stderr:
        launcher = subprocess.Popen(
            group_command(config_file, token_cache, killed, processes=2),
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        while not saved_steps(killed) and launcher.poll() is None:
            time.sleep(0.02)
        group = psutil.Process(launcher.pid).children()
        victim = next(p for p in group if p.environ()["MARIN_PROCESS_ID"] == "1")
        victim.send_signal(signal.SIGKILL)
        assert launcher.wait() == 1
    assert "process 1 of 2 failed (killed by SIGKILL); stopped the others" in log.read_text()
    assert not any(p.is_running() for p in group)
    interrupted_at = saved_steps(killed)[-1]
    assert 0 < interrupted_at < STEPS, "the kill came too late to test anything"

    summary = train_group(config_file, token_cache, killed, processes=2)
    assert summary["resumed_from_step"] >= interrupted_at
    # every step's loss and the final parameters equal the uninterrupted run's: the steps before the kill
    # are a second run from scratch, so this is also the check that two-process runs are reproducible
    assert final_sha256(killed) == final_sha256(two_processes[0])
    assert losses(killed) == losses(two_processes[0])
    assert summary["processes"] == 2 and summary["devices"] == 2


def test_a_two_process_checkpoint_resumes_on_one_process(two_processes, config_file, token_cache, tmp_path):
    """Another layout: the folder as a crash after the checkpoint of step 16 would leave it goes on in one
    process with one device, within float reduction order of the uninterrupted two-process run."""
    uninterrupted, reference = two_processes
    resumed = tmp_path / "resumed"
    shutil.copytree(uninterrupted, resumed)
    shutil.rmtree(resumed / "checkpoints" / str(STEPS))
    summary = train_group(config_file, token_cache, resumed, processes=1)
    assert summary["resumed_from_step"] == STEPS - 4
    assert summary["processes"] == 1 and summary["devices"] == 1
    segments = [(s["from_step"], s["processes"], s["devices"]) for s in summary["layouts"]]
    assert segments == [(0, 2, 2), (STEPS - 4, 1, 1)]
    assert summary["final_loss"] == pytest.approx(reference["final_loss"], rel=0.02)
    np.testing.assert_allclose(losses(resumed), losses(uninterrupted), rtol=2e-3)
