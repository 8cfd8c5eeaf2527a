"""Kills at every stage: `marin-pipelines experiment` is SIGKILLed (with its training or evaluation child)
at a random moment inside a document stage, the tokenization, the training and the evaluation, and run
again each time. The final outputs equal those of the session's uninterrupted tiny pipeline, and no folder
without a manifest was ever taken for an output."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_pipeline import tiny_experiment

from marin_pipelines.experiment import Experiment
from marin_pipelines.store import ArtifactStore
from marin_pipelines.train.checkpoint import load_params, params_sha256

# stage kinds, in the order they run: each is killed once, at a random moment of its reference duration
KILLED_IN = ("extracted_text", "tokenized_cache", "checkpoint", "eval_results")
KILL_TRIES = 3
# what an evaluation or training run measures of its own speed: not part of what it computed
TIMING_KEYS = {"wall_seconds", "seconds", "tokens_per_s", "mfu", "elapsed", "created", "samples_per_s"}
EXPERIMENT_MODULE = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from tiny_pipeline import tiny_experiment
from marin_pipelines.experiment import Experiment
killed = Experiment("killed", steps=tiny_experiment("killed").steps)  # declared here: found in this file
"""


def steps_by_stage(experiment: Experiment) -> dict[str, object]:
    return {step.stage.name: step for step in experiment.all_steps}


def partition(step) -> str | None:
    return step.partition_keys()[0] if step.partitioning else None


def lease_of(store: ArtifactStore, step) -> Path:
    return Path(store.url(step.key, step.version, partition(step))).with_name(f".{step.version}.lease")


def run_until_killed(command, env, store: ArtifactStore, step, delay: float) -> subprocess.CompletedProcess:
    """Start the experiment; once ``step`` is being computed (its lease exists), wait ``delay`` seconds and
    SIGKILL the whole process group. Returns what it printed."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lease = lease_of(store, step)
    while not lease.exists():
        assert process.poll() is None, (
            f"it ended before {step.name} started:\n{process.stdout.read()[-3000:]}"
        )
        time.sleep(0.02)
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGKILL)
    out = process.communicate()[0]
    return subprocess.CompletedProcess(command, process.returncode, out)


def without_timings(value):
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def outputs(store: ArtifactStore, step) -> dict[str, object]:
    """What a step computed, as comparable values: file hashes, parameters, results without timings."""
    artifact = store.get(step.key, step.version, partition(step))
    assert artifact is not None, f"{step.name} has no complete output"
    if step.stage.name == "checkpoint":
        return {"params": params_sha256(load_params(artifact.path)[1]), "steps": artifact.metadata["steps"]}
    if step.stage.name == "eval_results":
        return without_timings(json.loads(artifact.read_bytes("results.json")))
    return {f["name"]: f["sha256"] for f in artifact.manifest["files"]}


@pytest.fixture(scope="module")
def killed_four_times(tiny_store, tmp_path_factory):
    folder = tmp_path_factory.mktemp("killed")
    (folder / "experiments").mkdir()
    (folder / "experiments" / "killed.py").write_text(EXPERIMENT_MODULE)
    store = ArtifactStore(folder / "store")
    env = {
        **os.environ,
        "MARIN_EXPERIMENTS_PATH": str(folder / "experiments"),
        "DAGSTER_HOME": str(folder),
        "WANDB_MODE": "disabled",
    }
    cli = str(Path(sys.executable).with_name("marin-pipelines"))
    command = [cli, "experiment", "killed", "--store-root", store.root]
    steps, originals = steps_by_stage(tiny_experiment("killed")), steps_by_stage(tiny_experiment())
    assert [s.version for s in steps.values()] == [s.version for s in originals.values()]  # names only differ
    reference = ArtifactStore(tiny_store)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    kills, logs = [], []
    for stage in KILLED_IN:
        step = steps[stage]
        original = originals[stage]
        took = reference.get(original.key, original.version, partition(original)).manifest["wall_seconds"]
        # within the first half of the reference's time. That time was measured under another load, and
        # included compiling, which the JAX cache the run shares can spare the killed run: a kill that
        # finds the step done is tried again, earlier, on the step's output removed
        delay = rng.uniform(0.05, 0.5) * took
        said = ""  # every try's output: a retry reuses what the try before it took over and finished
        for _ in range(KILL_TRIES):
            done = run_until_killed(command, env, store, step, delay)
            assert done.returncode == -signal.SIGKILL, done.stdout[-3000:]
            said += done.stdout
            finished = store.get(step.key, step.version, partition(step))
            if finished is None:
                break
            shutil.rmtree(finished.path)
            delay /= 4
        assert finished is None, f"{stage} finished before each of {KILL_TRIES} kills"
        logs.append(said)
        kills.append((stage, round(delay, 2)))
    final = subprocess.run(command, env=env, capture_output=True, text=True)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    logs.append(final.stdout + final.stderr)
    return store, (reference, originals), steps, f"seed {seed}: {kills}", logs


def test_every_output_equals_the_uninterrupted_runs(killed_four_times):
    store, (reference, originals), steps, kills, _ = killed_four_times
    for stage, step in steps.items():
        assert outputs(store, step) == outputs(reference, originals[stage]), f"{step.name} after {kills}"


def test_each_rerun_takes_over_from_the_killed_run_at_once(killed_four_times):
    _, _, steps, kills, logs = killed_four_times
    for stage, later in zip(KILLED_IN, logs[1:], strict=True):
        said = [line for line in later.splitlines() if line.startswith(steps[stage].name)]
        assert any("took over from a run ended without releasing it" in line for line in said), (stage, kills)


def test_training_resumed_and_nothing_is_left_behind(killed_four_times):
    store, _, steps, kills, _ = killed_four_times
    run = store.get(steps["checkpoint"].key, steps["checkpoint"].version)
    assert run.metadata["resumed_from_step"] in (0, 10), kills  # from its work folder, if it got that far
    left = [
        p.name for p in Path(store.root).rglob(".*") if p.suffix in (".lease", ".work") or ".tmp-" in p.name
    ]
    assert left == [], f"left behind after {kills}: {left}"
