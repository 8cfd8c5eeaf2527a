"""`marin-pipelines train`: one training run from a YAML config and a token cache, resumable.

Every launcher runs it (a subprocess here, a pod per host on Kubernetes) as ``python -m marin_pipelines.cli
train --step-config FILE``: the run config, the cache and the folder in one JSON file (``TrainLaunch``). Run
it again with the same arguments after a crash and it resumes from the last checkpoint in ``--out``, a
local folder or a ``gs://`` URL. A run of several processes joins them as ``MARIN_NUM_PROCESSES`` and
friends say (see ``marin_pipelines.train.distributed``); ``--num-processes N`` starts such a group on
this machine. Process 0 streams each logged step back under Dagster Pipes, writes to wandb and copies
the cache's ``tokenizer.json`` into ``--out``, so that ``marin-pipelines eval`` finds it there.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from marin_pipelines.cli import print_json
from marin_pipelines.cli.outputs import check_folder, held
from marin_pipelines.cli.step_config import add_step_config, step_config

if TYPE_CHECKING:
    from marin_pipelines.train.launch_config import TrainLaunch


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="train a model on a token cache (resumes if --out has one)")
    parser.add_argument("--config", help="YAML (path or URL): model (size or shape) and train")
    parser.add_argument("--data", help="a tokenized_cache output: a folder or a gs:// URL")
    parser.add_argument("--out", help="checkpoint directory, a folder or a gs:// URL (resumed if present)")
    parser.add_argument(
        "--steps",
        type=positive_int,
        help="override train.steps; a run in --out is resumed or extended, never cut: fewer steps than its "
        "checkpoint's are refused",
    )
    parser.add_argument(
        "--warm-start",
        metavar="DIR",
        help="start from this training folder's (or URL's) latest checkpoint: every parameter and optimiser "
        "leaf whose name and shape match (the model may differ: QK-norm added, more experts), the rest "
        "initialised, the learning rate re-warmed by this run's schedule",
    )
    parser.add_argument(
        "--fresh-optimizer", action="store_true", help="with --warm-start: parameters only, a fresh optimiser"
    )
    parser.add_argument(
        "--allow-other-tokenizer",
        action="store_true",
        help="with --warm-start: the base was trained on another tokenizer, or has no tokenizer.json to "
        "compare, and that is meant (its embeddings load for this run's token ids; both tokenizers, or the "
        "missing one, are recorded in train.json's warm_start); without it such a base is refused",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--num-processes",
        type=positive_int,
        help="run as this many local processes of one JAX cluster (CPU devices, gloo collectives), as a "
        "multi-host run runs one per host",
    )
    parser.add_argument(
        "--devices-per-process", type=positive_int, help="CPU devices of each local process (default 1)"
    )
    add_step_config(parser, ("config", "data", "out"), keeps=("num_processes", "devices_per_process"))
    parser.set_defaults(run=run_train)


@contextmanager
def dagster_pipes_reporter(log_every: int) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """Under Dagster Pipes: a callback sending every ``log_every``-th step (and skips) to the orchestrator."""
    from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, open_dagster_pipes

    if DAGSTER_PIPES_CONTEXT_ENV_VAR not in os.environ:
        yield None
        return
    with open_dagster_pipes() as pipes:

        def report(record: dict[str, Any]) -> None:
            if record["step"] % log_every == 0 or record["skipped"]:
                pipes.report_custom_message(record)
                pipes.log.info(
                    f"step {record['step']} loss {record['loss']:.4f} grad_norm {record['grad_norm']:.3f} "
                    f"lr {record['lr']:.2e} tokens/s {record['tokens_per_s']:.0f} mfu {record['mfu']:.1%}"
                    + (" SKIPPED" if record["skipped"] else "")
                )

        yield report


def step_reporters(
    stack: ExitStack, out: str, tracked: dict[str, Any], log_every: int
) -> list[Callable[[dict[str, Any]], None]]:
    """Where a training process sends its steps: Dagster Pipes (when launched under it) and wandb, from
    process 0 only (one voice towards the orchestrator and the tracker); open until ``stack`` closes."""
    from marin_pipelines.train.distributed import is_primary
    from marin_pipelines.train.tracking import wandb_run

    if not is_primary():
        return []
    reporters = [
        stack.enter_context(dagster_pipes_reporter(log_every)),
        stack.enter_context(wandb_run(out, tracked)),
    ]
    return [r for r in reporters if r]


def run_train(args: argparse.Namespace) -> int:
    launch = train_launch(args)
    check_folder(launch.out)
    if args.num_processes or args.devices_per_process:
        return run_local_group(launch, args.num_processes or 1, args.devices_per_process or 1)
    return train_process(launch)


def train_launch(args: argparse.Namespace) -> TrainLaunch:
    """The run ``--step-config`` holds, or the one the flags describe (``--steps`` over the YAML's)."""
    from pydantic import ValidationError

    from marin_pipelines.config_errors import describe
    from marin_pipelines.train.launch_config import TrainLaunch
    from marin_pipelines.train.run_config import load_run_config

    if file := step_config(args):
        return TrainLaunch.read(file)
    run = load_run_config(args.config)
    if args.steps is not None:
        run = run.model_copy(update={"train": run.train.model_copy(update={"steps": args.steps})})
        try:  # re-check steps against warmup_steps
            run = type(run).model_validate(run.model_dump())
        except ValidationError as e:
            raise ValueError(f"--steps {args.steps} with {args.config}: {describe(e, title='run')}") from None
    if not args.warm_start and (args.fresh_optimizer or args.allow_other_tokenizer):
        flag = "--fresh-optimizer" if args.fresh_optimizer else "--allow-other-tokenizer"
        raise ValueError(f"{flag} is for a --warm-start run")
    return TrainLaunch(
        run=run,
        data=args.data,
        out=args.out,
        progress_bar=not args.quiet,
        warm_start=args.warm_start,
        warm_start_optimizer=not args.fresh_optimizer,
        warm_start_other_tokenizer=args.allow_other_tokenizer,
    )


def train_process(launch: TrainLaunch) -> int:
    """One process of the run (of a group, where ``MARIN_NUM_PROCESSES`` and friends say so)."""
    from marin_pipelines.train.distributed import initialize, is_primary

    initialize()  # before JAX touches a device: the other processes' devices join the mesh
    from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR

    from marin_pipelines.train.launched import train_launched

    train = launch.run.train
    with ExitStack() as stack:
        if is_primary():  # one run writes a folder: a second waits, then resumes what the first finished
            stack.enter_context(held(launch.out, "train"))
        summary = train_launched(
            launch,
            lambda model: step_reporters(
                stack, launch.out, {"model": model.model_dump(), "train": train.model_dump()}, train.log_every
            ),
        )
    if is_primary() and not os.environ.get(DAGSTER_PIPES_CONTEXT_ENV_VAR):  # under Pipes it goes back there
        print_json(summary, indent=2)
    return 0


def run_local_group(launch: TrainLaunch, num_processes: int, devices_per_process: int) -> int:
    """The run as processes 0..N-1 of one JAX cluster on this machine, each on the run's launch file."""
    from marin_pipelines.train.distributed import ProcessGroupFailed, launch_local_group

    try:
        launch_local_group([sys.executable, *launch.write()], num_processes, devices_per_process)
    except ProcessGroupFailed as e:
        print(f"marin-pipelines: error: {e}", file=sys.stderr)
        return 1
    return 0
