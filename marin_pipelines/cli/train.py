"""`marin-pipelines train`: one training run from a YAML config and a token cache, resumable.

This is the entry point every launcher runs (a subprocess here, a pod on Kubernetes). Run it again
with the same arguments after a crash and it resumes from the last checkpoint in ``--out``. Under
Dagster Pipes it streams each logged step back to the orchestrator while it trains. The cache's
``tokenizer.json`` is copied into ``--out``, so that ``marin-pipelines eval`` finds it there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="train a model on a token cache (resumes if --out has one)")
    parser.add_argument("--config", required=True, type=Path, help="YAML: model (size or shape) and train")
    parser.add_argument("--data", required=True, type=Path, help="a tokenized_cache output directory")
    parser.add_argument("--out", required=True, type=Path, help="checkpoint directory (resumed if present)")
    parser.add_argument("--steps", type=int, help="override train.steps")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
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


def run_train(args: argparse.Namespace) -> int:
    from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR

    from marin_pipelines.tokenize.data_mixture import MixtureLoader
    from marin_pipelines.tokenize.tokenized_cache import TokenCache
    from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE
    from marin_pipelines.train.checkpoint import train
    from marin_pipelines.train.run_config import load_run_config
    from marin_pipelines.train.tracking import wandb_run

    run = load_run_config(args.config)
    if args.steps is not None:
        run = run.model_copy(update={"train": run.train.model_copy(update={"steps": args.steps})})
        run = type(run).model_validate(run.model_dump())  # re-check steps against warmup_steps
    model = run.llama(TokenCache(args.data).info["vocab_size"])
    args.out.mkdir(parents=True, exist_ok=True)  # the cache's tokenizer: evaluation needs no other input
    shutil.copyfile(args.data / TOKENIZER_FILE, args.out / TOKENIZER_FILE)
    # batch(step) is a pure function of the step: resuming needs no replay of the data.
    loader = MixtureLoader.from_config(
        run.data, str(args.data), model.seq_len, run.train.batch_size, run.train.seed
    )
    with ExitStack() as stack:
        callbacks = [
            stack.enter_context(dagster_pipes_reporter(run.train.log_every)),
            stack.enter_context(
                wandb_run(args.out, {"model": model.model_dump(), "train": run.train.model_dump()})
            ),
        ]
        summary = train(
            model,
            run.train,
            loader.batch,
            args.out,
            progress=not args.quiet,
            on_step=[c for c in callbacks if c],
        )
    if not os.environ.get(DAGSTER_PIPES_CONTEXT_ENV_VAR):  # under Pipes the summary goes back through it
        print(json.dumps(summary, indent=2))
    return 0
