"""`marin-pipelines`: the command line, a thin caller of the same assets and core library.

Each subcommand lives in its own module here with a ``register(subparsers)`` that adds its parser
and sets ``run``; heavy libraries are imported inside ``run`` so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from typing import Any

from marin_pipelines.orphans import die_with_launcher

COMMANDS = (
    "demo",
    "experiment",
    "tokenize",
    "train",
    "sft",
    "sweep",
    "checkpoint_info",
    "export_hf",
    "import_hf",
    "generate",
    "serve",
    "eval",
    "fit_scaling_law",
    "forecast",
    "plan_ladder",
    "leaderboard",
    "process_crawl",
    "decontaminate",
    "corpus",
    "extract",
)


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser: what ``main`` reads and what the documentation's reference is made from."""
    parser = argparse.ArgumentParser(prog="marin-pipelines", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    die_with_launcher()  # a launched child: no orphan once its launcher is gone
    try:
        return args.run(args)
    # bad input (ExperimentError is a ValueError) or a path that cannot be used: a message, not a traceback
    except (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as e:
        print(f"marin-pipelines: error: {error_message(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # the machine's limits (disk, memory) are the user's to change, not a bug's
        if (message := limit_message(e)) is None:
            raise
        print(f"marin-pipelines: error: {message}", file=sys.stderr)
        return 2


def print_json(value: Any, **dumps: Any) -> None:
    """Print ``value`` as JSON that any parser reads: a number that is not finite (NaN, infinity) becomes
    null; where one can arise, the value beside it says why."""
    print(json.dumps(_finite(value), allow_nan=False, **dumps), flush=True)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def limit_message(error: BaseException) -> str | None:
    """One line for an error that a full disk or too little memory caused, wherever it was raised (a
    checkpoint writer wraps the disk's error in its own); None for any other error."""
    from marin_pipelines.cli.outputs import describe_os_error, os_error_in

    if (found := os_error_in(error)) is not None:
        where = f" writing {found.filename}" if found.filename else ""
        known = found.strerror in (None, os.strerror(found.errno or 0))
        return f"{describe_os_error(found)}{where}" + ("" if known else f": {found.strerror}")
    text = str(error)
    if "RESOURCE_EXHAUSTED" in text or "Out of memory" in text:
        first = text.strip().splitlines()[0][:300]
        return (
            f"the run does not fit in the device's memory ({first}): lower the batch size, the sequence "
            "length or the model, or use more devices"
        )
    return None


def error_message(error: Exception) -> str:
    """What the user reads: a pydantic error as its bad fields, one per line, not pydantic's dump."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        from marin_pipelines.config_errors import describe

        return describe(error)
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
