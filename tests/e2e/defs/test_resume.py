"""Resume under Dagster: a training child killed mid-run is retried by Dagster's retry policy and resumes
from its last checkpoint in the step's work folder, ending bit-identical to an uninterrupted run."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance
from tiny_pipeline import tiny_run, tiny_tokens

from marin_pipelines.defs.local_run import materialize_experiment
from marin_pipelines.experiment import Experiment
from marin_pipelines.store import ArtifactStore
from marin_pipelines.train.checkpoint import load_params, params_sha256

TRAIN = {"steps": 60, "checkpoint_every": 20}  # over the tiny pipeline's run config


def training_children(work: str) -> list[int]:
    """Pids of the training processes writing into ``work`` (their command line names it)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        launched = cmdline[1:4] == [b"-m", b"marin_pipelines.cli", b"train"]
        if launched and any(work.encode() in arg for arg in cmdline):
            pids.append(int(proc.name))
    return pids


def kill_after_first_checkpoint(work: str, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the training child once its first checkpoint is on disk: a preempted pod."""
    while not stop.is_set() and not killed:
        if (Path(work) / "checkpoints" / "20").is_dir():
            for pid in training_children(work):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.05)


@pytest.fixture(scope="module")
def resumed(tiny_store):
    root = tiny_store  # the tiny pipeline's data steps are there already
    mp = pytest.MonkeyPatch()
    mp.setenv("MARIN_RETRY_DELAY_SECONDS", "0.5")
    tokens = tiny_tokens()
    run = tiny_run(tokens, "resume/run", **TRAIN)
    # the same run, never interrupted: logging more often makes it another version (one version would be
    # one output, reused rather than trained again), and changes no number
    twin = tiny_run(tokens, "resume/twin", **{**TRAIN, "log_every": 3})
    store = ArtifactStore(root)
    work = store.url(run.key, run.version).rsplit("/", 1)[0] + f"/.{run.version}.work"
    killed: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=kill_after_first_checkpoint, args=(work, killed, stop), daemon=True)
    watcher.start()
    instance = DagsterInstance.ephemeral()
    try:
        result = materialize_experiment(Experiment("resume", steps=[run, twin]), root, instance)
    finally:
        stop.set()
        mp.undo()
    return store, run, twin, result, killed, instance


def test_a_killed_training_child_is_retried_and_resumes_from_its_checkpoint(resumed):
    store, run, _, result, killed, instance = resumed
    assert killed, "the training child was never killed"
    artifact = store.get(run.key, run.version)
    assert artifact.metadata["resumed_from_step"] == 20 and artifact.metadata["steps"] == 60
    (event,) = [m for m in result.materialized if m.asset == "resume/run"]
    assert event.metadata["resumed_from_step"] == 20  # shown on the asset in the UI
    assert not Path(store.url(run.key, run.version)).with_name(f".{run.version}.work").exists()


def test_the_resumed_run_is_bit_identical_to_an_uninterrupted_one(resumed):
    store, run, twin, *_ = resumed
    a = store.get(run.key, run.version).path
    b = store.get(twin.key, twin.version).path
    assert store.get(twin.key, twin.version).metadata["resumed_from_step"] == 0
    assert params_sha256(load_params(a)[1]) == params_sha256(load_params(b)[1])
