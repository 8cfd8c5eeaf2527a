"""Two runs, one step: real processes build the same step version at once, on a folder and on a bucket
(the Cloud Storage emulator, behind the proxy that applies ``ifGenerationMatch`` as a bucket does). Exactly
one computes and the others reuse its output; a writer killed mid-build is taken over; a writer frozen past
its lease (its heartbeat stopped) is taken over, and finds that out and commits nothing."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest
from pydantic import BaseModel

from marin_pipelines.engine import LocalEngine
from marin_pipelines.lease import create_new, read_lease
from marin_pipelines.steps import Step, StepContext, build_step, stage
from marin_pipelines.store import ArtifactStore

TTL = "1.5"  # seconds without a heartbeat before a lease is taken over


class SlowConfig(BaseModel):
    text: str = "the same bytes, whoever writes them"


@stage(SlowConfig)
def slow_output(ctx: StepContext, out, config: SlowConfig) -> None:
    """Sleeps ``LEASE_TEST_SLEEP`` seconds, noting its start and end in ``LEASE_TEST_LOG``."""
    note = Path(os.environ["LEASE_TEST_LOG"])
    with note.open("a") as f:
        f.write(f"{os.getpid()} start\n")
    time.sleep(float(os.environ["LEASE_TEST_SLEEP"]))
    (out.path / "out.txt").write_text(config.text)
    with note.open("a") as f:
        f.write(f"{os.getpid()} end\n")


def the_step() -> Step:
    return Step("t/slow", slow_output, SlowConfig())


def build(root: str) -> None:
    """What each competing process runs: build the step (its log to stdout), print the output's URL."""
    say = lambda m: print(m, flush=True)  # noqa: E731
    ctx = StepContext(
        the_step(), ArtifactStore(root), log=say, engine=LocalEngine(1), made_by={"pid": str(os.getpid())}
    )
    print("URL", build_step(ctx, {}).url, flush=True)


def start(root: str, log: Path, sleep: float, env: dict[str, str]) -> subprocess.Popen:
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_lease; "
    code += f"test_lease.build({root!r})"
    env = {**env, "LEASE_TEST_LOG": str(log), "LEASE_TEST_SLEEP": str(sleep), "MARIN_LEASE_SECONDS": TTL}
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def events(log: Path) -> list[tuple[int, str]]:
    lines = log.read_text().split() if log.exists() else []
    return [(int(pid), what) for pid, what in zip(lines[::2], lines[1::2], strict=True)]


def leftovers(root: str) -> list[str]:
    """What is beside the step's output besides the output itself: leases, markers, temp folders."""
    fs, base = fsspec.core.url_to_fs(f"{root}/t/slow/_")
    return [name for name in fs.ls(base, detail=False) if not name.rstrip("/").endswith(the_step().version)]


@pytest.fixture(params=["folder", "bucket"])
def where(request, tmp_path) -> tuple[str, dict[str, str]]:
    """A store root and the environment of the competing processes."""
    if request.param == "folder":
        return str(tmp_path / "store"), dict(os.environ)
    root = request.getfixturevalue("gcs_root")
    # gcsfs through the proxy: the emulator alone ignores ifGenerationMatch
    return root, {**os.environ, "STORAGE_EMULATOR_HOST": os.environ["TENSORSTORE_GCS_HTTP_URL"]}


def test_three_runs_at_once_compute_once(where, tmp_path):
    root, env = where
    log = tmp_path / "log"
    runs = [start(root, log, 4.0, env) for _ in range(3)]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    assert [what for _, what in events(log)] == ["start", "end"]  # one computed
    urls = {line for out in outputs for line in out.splitlines() if line.startswith("URL")}
    assert len(urls) == 1
    assert sum("made meanwhile by another run" in out for out in outputs) == 2
    assert sum("waiting for the run building it" in out for out in outputs) == 2
    artifact = ArtifactStore(root).get(the_step().key, the_step().version)
    assert artifact is not None and artifact.read_bytes("out.txt") == SlowConfig().text.encode()
    assert leftovers(root) == []


def test_a_killed_writer_is_taken_over(where, tmp_path):
    root, env = where
    log = tmp_path / "log"
    first = start(root, log, 60.0, env)
    wait_for(lambda: events(log))  # it holds the lease and computes
    second = start(root, log, 0.5, env)
    time.sleep(1.0)  # the second waits on the first's heartbeat
    first.send_signal(signal.SIGKILL)
    first.wait()
    out = second.communicate(timeout=120)[0]
    assert second.returncode == 0, out
    assert "took over from a run ended without releasing it" in out  # a process of this host: no wait
    assert events(log) == [(first.pid, "start"), (second.pid, "start"), (second.pid, "end")]
    assert ArtifactStore(root).get(the_step().key, the_step().version) is not None
    assert leftovers(root) == []


def test_a_writer_frozen_past_its_lease_commits_nothing(tmp_path):
    root, log = str(tmp_path / "store"), tmp_path / "log"
    frozen = start(root, log, 4.0, dict(os.environ))
    wait_for(lambda: events(log))
    frozen.send_signal(signal.SIGSTOP)  # no heartbeat: as a process stuck in a long pause would be
    other = start(root, log, 0.5, dict(os.environ))
    assert other.wait(timeout=120) == 0
    frozen.send_signal(signal.SIGCONT)
    out = frozen.communicate(timeout=120)[0]
    assert "took over from a run silent for 1.5 s" in other.stdout.read()  # alive: its heartbeat stopped
    assert frozen.returncode != 0
    assert "another run took this step over" in out and "its output is discarded" in out
    artifact = ArtifactStore(root).get(the_step().key, the_step().version)
    assert artifact is not None and artifact.manifest["made_by"] == {"pid": str(other.pid)}
    assert [pid for pid, what in events(log) if what == "end"] == [other.pid]
    assert leftovers(root) == []


def test_create_new_is_create_if_absent(tmp_path):
    fs = fsspec.filesystem("file")
    path = str(tmp_path / ".v1.lease")
    assert create_new(fs, path, b'{"token": "a"}')
    assert not create_new(fs, path, b'{"token": "b"}')
    assert read_lease(fs, path) == {"token": "a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".v1.lease"]  # nothing staged is left
