"""`marin-pipelines sft --base BASE_DIR --data TRAIN.jsonl --out DIR`: supervised fine-tuning of a base run on
chat data (``marin_pipelines.train.sft``); with ``--heldout`` the base and the tuned model's held-out chat
losses are compared. The summary is the last line printed, as JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sft", help="fine-tune a base run on chat data (assistant tokens only)")
    parser.add_argument("--base", required=True, help="the base run's directory (or URL), with its tokenizer")
    parser.add_argument("--data", nargs="+", required=True, help='JSON-lines chat files: {"messages": [...]}')
    parser.add_argument("--out", required=True, help="the run directory (a rerun resumes it)")
    parser.add_argument("--config", help="a YAML file with a `train:` section (TrainConfig fields)")
    parser.add_argument("--steps", type=int, help="override train.steps")
    parser.add_argument(
        "--chat-template", type=Path, help="a Jinja chat template (default: marin-pipelines')"
    )
    parser.add_argument("--heldout", nargs="+", default=[], help="held-out chat files: base vs tuned loss")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tokenizers import Tokenizer
    from upath import UPath

    from marin_pipelines.evals.chat_loss import chat_loss
    from marin_pipelines.tokenize.chat_data import DEFAULT_TEMPLATE, ChatTemplate
    from marin_pipelines.tokenize.tokenizer import TOKENIZER_FILE
    from marin_pipelines.train.checkpoint import load_checkpoint
    from marin_pipelines.train.sft import load_sft_config, sft

    config = load_sft_config(args.config, args.steps)
    template = args.chat_template.read_text() if args.chat_template else DEFAULT_TEMPLATE
    summary = sft(args.base, args.data, args.out, config, template, progress=not args.quiet)
    if args.heldout:
        tokenizer = Tokenizer.from_str((UPath(args.base) / TOKENIZER_FILE).read_text())
        chat = ChatTemplate(tokenizer, template)
        summary["heldout_chat_loss"] = {
            name: chat_loss(load_checkpoint(where)[0], chat, args.heldout, config.batch_size)["loss"]
            for name, where in (("base", args.base), ("sft", args.out))
        }
    print(json.dumps(summary))
    return 0
