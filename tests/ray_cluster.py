"""A real Ray cluster on this machine for the tests: a head node and a worker node, each its own
``ray start --block`` process (as on two machines), started from this venv so that their workers import
the project.

What the settings are for (measured with Ray 2.60):
- ``RAY_AUTH_MODE=disabled`` everywhere: otherwise a ``~/.ray/auth_token`` left by any earlier local
  ``ray.init()`` turns token auth on for some processes only, and the driver fails after ~21 s with a bare
  ``ConnectionError``. ``RAY_USAGE_STATS_ENABLED=0``: nothing phones home.
- Health checks every 0.5 s: a killed node is declared dead in ~1 s instead of ~15 s, then its tasks retry.
- A short temp dir under /tmp (Unix socket paths must stay under 107 bytes) per cluster, so that parallel
  test sessions never share one; never ``ray stop``, which kills every Ray process on the machine.
- A node is stopped by SIGTERM to its ``ray start`` (no drain), then SIGKILL to whatever is left in its
  session: its workers set their own process groups, and a worker that outlives its raylet can still
  deliver a result, so a "lost machine" is every process of the node's session.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).parent / "ray")
ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "2",
}
NODE_FLAGS = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", f"--object-store-memory={80 << 20}"]


def _die_with_parent() -> None:
    """The node's own session, and SIGTERM when the test process dies (a CI timeout leaves no cluster)."""
    os.setsid()
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Node:
    """One ``ray start --block`` process and everything it starts (its session)."""

    def __init__(self, args: list[str], log: Path):
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [RAY, "start", "--block", *args, *NODE_FLAGS],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **ENV},
                preexec_fn=_die_with_parent,
            )

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match[str]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if found := re.search(pattern, self.log.read_text()):
                return found
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited ({self.proc.returncode}):\n{self.log.read_text()}")
            time.sleep(0.1)
        raise TimeoutError(f"no {pattern!r} from ray start in {timeout} s:\n{self.log.read_text()}")

    def processes(self) -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["pid"]):
            try:
                if os.getsid(process.pid) == self.proc.pid:
                    found.append(process)
            except (ProcessLookupError, PermissionError, psutil.Error):
                pass
        return found

    def busy(self) -> bool:
        """Whether one of the node's workers is running a task now (Ray names it after the task)."""
        for process in self.processes():
            try:
                if process.cmdline()[:1] == ["ray::_call"]:
                    return True
            except psutil.Error:
                pass
        return False

    def kill(self) -> None:
        """The machine is lost: SIGKILL to every process of the node."""
        for process in self.processes():
            with contextlib.suppress(psutil.Error):
                process.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        deadline = time.time() + 15
        while (left := self.processes()) and time.time() < deadline:
            time.sleep(0.2)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()


class LocalCluster:
    """A head and a worker node, 1 CPU each; ``address`` is the head's GCS, as ``RAY_ADDRESS`` takes it."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
        self.nodes: list[Node] = []
        try:
            self.head = self._node(
                "head",
                ["--head", "--port=0", "--num-cpus=1", "--include-dashboard=false"]
                + [f"--ray-client-server-port={_free_port()}"],
            )
            self.address = self.head.wait_for(r"ray start --address='([^']+)'").group(1)
            self.worker = self._node("worker", [f"--address={self.address}", "--num-cpus=1"])
            self.worker.wait_for(r"Ray runtime started")
        except BaseException:
            self.stop()
            raise

    def _node(self, name: str, args: list[str]) -> Node:
        node = Node([*args, f"--temp-dir={self.folder / name}"], self.folder / f"{name}.log")
        self.nodes.append(node)
        return node

    def warm_worker_node(self, module: str) -> None:
        """A worker process on the worker node with ``module`` imported, for the connected driver's job.

        Without it a loaded machine can finish every short unit on the head while the worker node is
        still starting its first Python process, so a test that needs a unit there would see none."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        head = ray.get_runtime_context().get_node_id()
        worker = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)

        def imported() -> int:
            __import__(module)
            return os.getpid()

        pinned = NodeAffinitySchedulingStrategy(worker, soft=False)
        ray.get(ray.remote(imported).options(scheduling_strategy=pinned).remote(), timeout=120)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
