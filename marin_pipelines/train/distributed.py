"""One training run over several processes (hosts), as JAX's multi-controller model runs it.

Every process runs the same command and calls ``jax.distributed.initialize``; their devices then form one
mesh and one program. A cluster launcher (one pod per host: an indexed Job or a JobSet) says who is who
with environment variables, read by ``initialize``:

- ``MARIN_NUM_PROCESSES`` (N > 1: distributed), ``MARIN_PROCESS_ID`` (0 .. N-1) and
  ``MARIN_COORDINATOR_ADDRESS`` (``host:port`` of process 0);
- or ``MARIN_DISTRIBUTED=auto``: JAX finds the cluster itself (TPU slices, SLURM).

``launch_local_group`` starts such a group on this machine (CPU devices, gloo collectives), so that the
multi-host code path runs, and is tested, without a cluster.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from marin_pipelines.orphans import die_with_parent

NUM_PROCESSES = "MARIN_NUM_PROCESSES"
PROCESS_ID = "MARIN_PROCESS_ID"
COORDINATOR_ADDRESS = "MARIN_COORDINATOR_ADDRESS"
DISTRIBUTED = "MARIN_DISTRIBUTED"
POLL_SECONDS = 0.1


class ProcessGroupFailed(RuntimeError):
    """A process of a local group exited with an error; the others were stopped."""


@dataclass(frozen=True)
class ProcessGroup:
    """This process's place in a run of several: what ``jax.distributed.initialize`` is told."""

    num_processes: int
    process_id: int
    coordinator_address: str


def _int_variable(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except KeyError:
        raise ValueError(f"{name} is not set ({NUM_PROCESSES} > 1 needs it)") from None
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {environ[name]!r}") from None


def process_group(environ: Mapping[str, str] = os.environ) -> ProcessGroup | None:
    """The group that ``MARIN_NUM_PROCESSES`` and friends describe, or None for a single process."""
    if NUM_PROCESSES not in environ:
        return None
    num_processes = _int_variable(environ, NUM_PROCESSES)
    if num_processes < 1:
        raise ValueError(f"{NUM_PROCESSES} must be >= 1, got {num_processes}")
    if num_processes == 1:
        return None
    process_id = _int_variable(environ, PROCESS_ID)
    if not 0 <= process_id < num_processes:
        raise ValueError(f"{PROCESS_ID} must be in 0..{num_processes - 1}, got {process_id}")
    address = environ.get(COORDINATOR_ADDRESS, "")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{COORDINATOR_ADDRESS} must be host:port of process 0, got {address!r}")
    return ProcessGroup(num_processes, process_id, address)


def initialize(environ: Mapping[str, str] = os.environ) -> None:
    """Join the run's JAX cluster as the environment says; nothing for a single process.

    Call it before JAX touches a device: the devices of every process are only visible after it.
    """
    import jax

    mode = environ.get(DISTRIBUTED, "")
    if mode == "auto":
        if NUM_PROCESSES in environ:
            raise ValueError(f"set {DISTRIBUTED}=auto or {NUM_PROCESSES}, not both")
        jax.distributed.initialize()
        return
    if mode:
        raise ValueError(f"{DISTRIBUTED} must be 'auto' or unset, got {mode!r}")
    group = process_group(environ)
    if group is not None:
        jax.distributed.initialize(
            coordinator_address=group.coordinator_address,
            num_processes=group.num_processes,
            process_id=group.process_id,
        )


def is_primary() -> bool:
    """Process 0 writes the run's files and talks to the orchestrator and trackers; the others compute."""
    import jax

    return jax.process_index() == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def local_env(group: ProcessGroup, devices_per_process: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of one process of a local group: its place, and ``devices_per_process`` CPU devices."""
    flags = [
        flag
        for flag in environ.get("XLA_FLAGS", "").split()
        if not flag.startswith("--xla_force_host_platform_device_count")
    ]
    flags.append(f"--xla_force_host_platform_device_count={devices_per_process}")
    return {
        **environ,
        NUM_PROCESSES: str(group.num_processes),
        PROCESS_ID: str(group.process_id),
        COORDINATOR_ADDRESS: group.coordinator_address,
        "JAX_PLATFORMS": "cpu",
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
        "XLA_FLAGS": " ".join(flags),
    }


def _exit_reason(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def launch_local_group(command: Sequence[str], num_processes: int, devices_per_process: int) -> None:
    """Run ``command`` as processes 0..N-1 of one JAX cluster on this machine and wait for all of them.

    When one fails the others are stopped (they would wait for it in their next collective forever) and
    ``ProcessGroupFailed`` names it and its exit code.
    """
    if num_processes < 1 or devices_per_process < 1:
        raise ValueError(
            "num_processes and devices_per_process must be >= 1, "
            f"got {num_processes} and {devices_per_process}"
        )
    if process_group() is not None or os.environ.get(DISTRIBUTED):
        raise ValueError(f"already part of a distributed run ({NUM_PROCESSES} or {DISTRIBUTED} is set)")
    address = f"127.0.0.1:{_free_port()}"
    processes: list[subprocess.Popen] = []
    try:
        for process_id in range(num_processes):
            env = local_env(ProcessGroup(num_processes, process_id, address), devices_per_process, os.environ)
            processes.append(
                subprocess.Popen(command, env=env, preexec_fn=partial(die_with_parent, os.getpid()))
            )
        while True:
            codes = [process.poll() for process in processes]
            failed = [(i, code) for i, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                process_id, code = failed[0]
                raise ProcessGroupFailed(
                    f"process {process_id} of {num_processes} failed ({_exit_reason(code)}); "
                    "stopped the others"
                )
            if all(code == 0 for code in codes):
                return
            time.sleep(POLL_SECONDS)
    finally:
        _stop(processes)


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGKILL whichever still run. Without the failed one they cannot finish (their next collective waits
    for it), JAX takes SIGTERM for a preemption notice, and what they saved is complete or absent (orbax
    and whole-file writes are atomic): nothing is lost that a gentler stop would keep."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
