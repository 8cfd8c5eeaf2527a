"""`marin-pipelines sft --base BASE_DIR --data TRAIN.jsonl --out DIR`: supervised fine-tuning of a base run on
chat data (``marin_pipelines.train.sft``). With ``--heldout`` the base and the tuned model's held-out chat
losses are compared and written to ``heldout_chat_loss.json`` in the run.

This is also what the launchers run for an ``sft_checkpoint`` step (``python -m marin_pipelines.cli sft
--step-config FILE``, the run in one JSON file: ``SFTLaunch``): as
``train`` does, process 0 streams its logged steps back under Dagster Pipes and writes to wandb, a run of
several processes joins them (``MARIN_NUM_PROCESSES``...), and a rerun resumes. Paths may be ``gs://`` URLs.
Outside Pipes the summary is the last line printed, as JSON."""

from __future__ import annotations

import argparse
import json
import os
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from marin_pipelines.cli import print_json
from marin_pipelines.cli.outputs import check_folder, held
from marin_pipelines.cli.step_config import add_step_config, step_config
from marin_pipelines.cli.train import positive_int, step_reporters

if TYPE_CHECKING:
    from marin_pipelines.train.launch_config import SFTLaunch


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sft", help="fine-tune a base run on chat data (assistant tokens only)")
    parser.add_argument("--base", help="the base run's directory (or URL), with its tokenizer")
    parser.add_argument("--data", nargs="+", help='JSON-lines chat files: {"messages": [...]}')
    parser.add_argument("--out", help="the run directory (a rerun resumes it)")
    parser.add_argument(
        "--config", help="a YAML file (path or URL) with a `train:` section (TrainConfig fields)"
    )
    parser.add_argument("--steps", type=positive_int, help="override train.steps")
    parser.add_argument(
        "--chat-template", help="a Jinja chat template file, path or URL (default: marin-pipelines')"
    )
    parser.add_argument("--heldout", nargs="+", default=[], help="held-out chat files: base vs tuned loss")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_step_config(parser, ("base", "data", "out"))
    parser.set_defaults(run=run)


def sft_launch(args: argparse.Namespace) -> SFTLaunch:
    """The run ``--step-config`` holds, or the one the flags describe."""
    from marin_pipelines.store import read_url
    from marin_pipelines.train.launch_config import SFTLaunch
    from marin_pipelines.train.sft import load_sft_config

    if file := step_config(args):
        return SFTLaunch.read(file)
    return SFTLaunch(
        base=args.base,
        data=args.data,
        out=args.out,
        train=load_sft_config(args.config, args.steps),
        chat_template=read_url(args.chat_template) if args.chat_template else None,
        heldout=args.heldout,
        progress_bar=not args.quiet,
    )


def run(args: argparse.Namespace) -> int:
    launch = sft_launch(args)
    check_folder(launch.out)
    from marin_pipelines.train.distributed import initialize, is_primary

    initialize()  # before JAX touches a device, as `train` does
    from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR

    from marin_pipelines.store import write_url
    from marin_pipelines.tokenize.chat_data import DEFAULT_TEMPLATE
    from marin_pipelines.train.sft import HELDOUT_FILE, sft

    config, out = launch.train, launch.out
    template = launch.chat_template or DEFAULT_TEMPLATE
    with ExitStack() as stack:
        if is_primary():  # one run writes a folder, as in `train`
            stack.enter_context(held(out, "sft"))
        tracked = {"base": launch.base, "data": launch.data, "train": config.model_dump()}
        callbacks = step_reporters(stack, out, tracked, config.log_every)
        summary = sft(launch.base, launch.data, out, config, template, launch.progress_bar, callbacks)
        if launch.heldout and is_primary():
            summary["heldout_chat_loss"] = losses = heldout_losses(
                launch.base, out, launch.heldout, template, config.batch_size
            )
            write_url(f"{out.rstrip('/')}/{HELDOUT_FILE}", json.dumps(losses, indent=2))
    if is_primary() and not os.environ.get(DAGSTER_PIPES_CONTEXT_ENV_VAR):
        print_json(summary)
    return 0


def heldout_losses(
    base: str, tuned: str, heldout: list[str], template: str, batch_size: int
) -> dict[str, Any]:
    """Loss per assistant token on the held-out conversations, of the base run and of the tuned one (None,
    with ``no_loss`` saying why, where no assistant token could be scored)."""
    from tokenizers import Tokenizer
    from upath import UPath

    from marin_pipelines.evals.chat_loss import chat_loss
    from marin_pipelines.tokenize.chat_data import ChatTemplate
    from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE, run_special_tokens
    from marin_pipelines.train.checkpoint import load_checkpoint

    tokenizer = Tokenizer.from_str((UPath(base) / TOKENIZER_FILE).read_text())
    chat = ChatTemplate(tokenizer, template, run_special_tokens(base))
    result = {}
    for name, where in (("base", base), ("sft", tuned)):
        measured = chat_loss(load_checkpoint(where)[0], chat, heldout, batch_size)
        result[name] = measured["loss"]
        result["assistant_tokens"] = measured["assistant_tokens"]
        if "no_loss" in measured:
            result["no_loss"] = measured["no_loss"]
    return result
