"""Children die with their parent: a SIGKILL of `process-crawl` (its pool workers) or of `experiment`
during training (its launched training child) leaves no process of theirs behind to write on into the
folder that the rerun resumes in. Only the parent is killed, as a crash or the OOM killer kills it."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tiny_pipeline import tiny_experiment

from marin_pipelines.store import ArtifactStore

CLI = str(Path(sys.executable).with_name("marin-pipelines"))
GONE_WITHIN = 10.0  # seconds: the kernel signals them as the parent dies; this is only the poll's patience


def alive(pid: int) -> bool:
    """Running (a dead child waiting to be reaped, state Z, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def command_line(pid: int) -> bytes:
    """Its arguments, each ended by a NUL byte."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def wait_for(what, timeout: float = 120.0, process: subprocess.Popen | None = None, said: Path | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if found := what():
            return found
        assert process is None or process.poll() is None, "it ended before it could be killed: " + (
            said.read_text()[-3000:] if said else ""
        )
        time.sleep(0.02)
    raise AssertionError(f"nothing after {timeout} s")


def kill_only_the_parent(process: subprocess.Popen, left: list[int]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()
    end = time.monotonic() + GONE_WITHIN
    while any(alive(pid) for pid in left) and time.monotonic() < end:
        time.sleep(0.05)
    running = [pid for pid in left if alive(pid)]
    for pid in running:  # not to leave them to the other tests
        os.kill(pid, signal.SIGKILL)
    assert not running, f"processes {running} outlived their killed parent"


def test_process_crawl_workers_die_with_it(demo_crawl, tmp_path):
    crawl, _ = demo_crawl
    command = [CLI, "process-crawl", "--warc", str(crawl), "--out", str(tmp_path / "out"), "--workers", "2"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = wait_for(lambda: children(process.pid), process=process)
    kill_only_the_parent(process, workers)


def test_a_training_child_dies_with_its_experiment(tiny_store, tmp_path):
    # the session's tiny store up to its run: the experiment goes straight to training, in a child
    experiment, source, store = (
        tiny_experiment(),
        ArtifactStore(tiny_store),
        ArtifactStore(tmp_path / "store"),
    )
    for step in experiment.all_steps:
        if step.stage.name not in ("checkpoint", "eval_results"):
            for partition in step.partition_keys() or [None]:
                url = source.url(step.key, step.version, partition)
                shutil.copytree(url, store.url(step.key, step.version, partition))
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "tiny.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from tiny_pipeline import tiny_experiment\nfrom marin_pipelines.experiment import Experiment\n"
        "tiny = Experiment('tiny', steps=tiny_experiment().steps)  # declared here: found in this file\n"
    )
    env = {
        **os.environ,
        "MARIN_EXPERIMENTS_PATH": str(tmp_path / "experiments"),
        "DAGSTER_HOME": str(tmp_path),
    }
    command = [CLI, "experiment", "tiny", "--store-root", store.root]
    said = (tmp_path / "said.txt").open("w")
    process = subprocess.Popen(command, env=env, stdout=said, stderr=subprocess.STDOUT)

    def trainer() -> list[int]:
        # the `train` command itself: this test's folder name holds "train" too, and Dagster's own
        # children (its compute-log `tail` on a file in that folder) would match a substring
        return [pid for pid in children(process.pid) if b"train" in command_line(pid).split(b"\0")]

    kill_only_the_parent(process, wait_for(trainer, process=process, said=tmp_path / "said.txt"))
