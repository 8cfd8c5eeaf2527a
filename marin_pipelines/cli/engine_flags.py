"""The flags that choose where a command's per-shard work runs: ``--engine {local,ray}``, ``--workers``
for the local pool, ``--ray-address`` for a running Ray cluster (else ``RAY_ADDRESS``, else a cluster
started for the command)."""

from __future__ import annotations

import argparse

from marin_pipelines.cpu_limit import available_cpus
from marin_pipelines.engine import ENGINES, Engine, make_engine


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine", choices=ENGINES, default="local", help="where the shards run (default: local processes)"
    )
    parser.add_argument(
        "--workers", type=int, default=available_cpus(), help="local processes (default: the CPU limit)"
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="a running Ray cluster, host:port of its GCS or ray://host:10001 (default: RAY_ADDRESS, "
        "else a cluster on this machine for the command)",
    )


def engine_from(args: argparse.Namespace) -> Engine:
    """The engine the flags name; a bad combination is an error naming the flag."""
    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, not {args.workers}")
    return make_engine(args.engine, args.ray_address, args.workers)
