"""`marin-pipelines checkpoint-info DIR`: what a training directory's (or URL's) checkpoint holds, as JSON."""

from __future__ import annotations

import argparse

from marin_pipelines.cli import print_json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "checkpoint-info",
        help="step, parameter counts (total and active) and sha256 of a training directory's checkpoint",
    )
    parser.add_argument("dir", help="a directory (or gs:// URL) written by `marin-pipelines train`")
    parser.add_argument("--step", type=int, help="which checkpoint (default: the latest)")
    parser.set_defaults(run=lambda args: print_info(args.dir, args.step))


def print_info(directory: str, step: int | None) -> int:
    from upath import UPath

    from marin_pipelines.train.checkpoint import Checkpoints, load_params, params_sha256
    from marin_pipelines.train.train_config import CHECKPOINTS_DIR

    _, params, config, step = load_params(directory, step)
    with Checkpoints(UPath(directory) / CHECKPOINTS_DIR) as checkpoints:
        steps = checkpoints.all_steps()
    info = {
        "step": step,
        "params": config.num_params(),  # trainable: an MoE's balance bias is state, not a parameter
        "active_params": config.num_params(active=True),  # what one token uses: FLOPs count these
        "sha256": params_sha256(params),
        "checkpoints": steps,
        "model": config.model_dump(),
    }
    print_json(info, indent=2)
    return 0
