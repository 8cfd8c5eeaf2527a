"""`marin-pipelines forecast --text PATH... --budgets B1,B2,... --target T --out DIR`: forecast, then check.

From text alone: a tokenizer and token cache (a validation split held out), an IsoFLOP ladder trained by
the recipe, the target's loss forecast and written down (``forecast.json``) before the target trains,
then the target trained and evaluated. Progress lines go to stderr; the last line of stdout is one JSON
object: the prediction, the actual loss, the error and the times. Run it again with the same arguments
after a kill and it resumes, reusing every finished rung and the forecast already written.
The work is steps in the store at ``--out``, run without Dagster: ``marin_pipelines.forecast``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from marin_pipelines.cli import print_json


def budgets(text: str) -> list[float]:
    """``1e11,2e11,4e11``: FLOP budgets."""
    try:
        return [float(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected FLOPs separated by commas, e.g. 1e11,2e11: {text!r}"
        ) from None


def recipe_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``: a recipe constant (a JSON value, else the text as a string)."""
    key, equals, value = text.partition("=")
    if not (equals and key):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, e.g. head_dim=8: {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """``--recipe NAME`` and ``--recipe-option KEY=VALUE`` (repeatable): a registered recipe and overrides."""
    parser.add_argument("--recipe", default="delphi", help="the scaling recipe (delphi, constant)")
    parser.add_argument(
        "--recipe-option",
        type=recipe_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one of the recipe's constants, e.g. head_dim=8 (repeatable)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "forecast",
        help="text in, a preregistered scaling forecast out: tokenize, train an IsoFLOP ladder, forecast, "
        "train the target and score the forecast",
    )
    parser.add_argument(
        "--text",
        nargs="+",
        required=True,
        metavar="PATH",
        help="files or folders: every file is one document, except .jsonl lines and .parquet rows with a "
        "'text' field, which are documents each; a folder of documents-*.parquet gives those shards",
    )
    parser.add_argument("--budgets", type=budgets, required=True, help="the ladder's FLOP budgets: B1,B2,...")
    parser.add_argument("--target", type=float, required=True, help="the FLOP budget forecast and then run")
    recipe_arguments(parser)
    parser.add_argument("--seeds", type=int, default=1, help="seeds per rung (their spread is reported)")
    parser.add_argument("--points-per-budget", type=int, default=5, help="sizes swept per budget (>= 3)")
    parser.add_argument("--vocab-size", type=int, default=2048, help="the BPE trained on the text")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per training sequence")
    parser.add_argument(
        "--validation-fraction",
        type=float,
        default=0.05,
        help="share of the documents held out: every run's loss is measured on them",
    )
    parser.add_argument(
        "--max-epochs",
        type=float,
        default=1.0,
        help="refuse (before training) a rung or target that reads the text more often than this",
    )
    parser.add_argument(
        "--out", required=True, help="the store the steps write to (a folder); a rerun resumes in it"
    )
    parser.set_defaults(run=run_forecast_command)


def run_forecast_command(args: argparse.Namespace) -> int:
    from marin_pipelines.forecast import run_forecast

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = run_forecast(
        args.text,
        args.budgets,
        args.target,
        args.recipe,
        args.seeds,
        args.out,
        vocab_size=args.vocab_size,
        seq_len=args.seq_len,
        max_epochs=args.max_epochs,
        points_per_budget=args.points_per_budget,
        validation_fraction=args.validation_fraction,
        recipe_overrides=dict(args.recipe_option),
        progress=say,
    )
    print_json(result)
    return 0
