"""`marin-pipelines checkpoint-info DIR`: what a training directory's (or URL's) checkpoint holds, as JSON."""

from __future__ import annotations

import argparse

from marin_pipelines.cli import print_json

# what the counts are, said where a person reads them
PARAMS_COUNTED = (
    "params and active_params: total with embeddings (the token embedding and LM head); "
    "non_embedding_params: non-embedding, the count recipes, forecasts and comparisons use"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "checkpoint-info",
        help="step, parameter counts (total with embeddings, active, non-embedding) and sha256 of a training "
        "directory's checkpoint",
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
        # trainable: an MoE's balance bias is state, not a parameter; the keys are train.json's summary's
        "params": config.num_params(),
        "active_params": config.num_params(active=True),  # what one token uses: FLOPs count these
        "non_embedding_params": config.num_params(include_embeddings=False),
        "params_counted": PARAMS_COUNTED,
        "sha256": params_sha256(params),
        "checkpoints": steps,
        "model": config.model_dump(),
    }
    print_json(info, indent=2)
    return 0
