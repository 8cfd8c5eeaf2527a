"""`marin-pipelines`: the command line, a thin caller of the same assets and core library.

Each subcommand lives in its own module here with a ``register(subparsers)`` that adds its parser
and sets ``run``; heavy libraries are imported inside ``run`` so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = (
    "demo",
    "experiment",
    "tokenize",
    "train",
    "sft",
    "checkpoint_info",
    "export_hf",
    "eval",
    "fit_scaling_law",
    "forecast",
    "leaderboard",
    "process_crawl",
    "extract",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="marin-pipelines", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    # bad input (ExperimentError is a ValueError) or a path that cannot be used: a message, not a traceback
    except (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as e:
        print(f"marin-pipelines: error: {error_message(e)}", file=sys.stderr)
        return 2


def error_message(error: Exception) -> str:
    """What the user reads: a pydantic error as its bad fields, one per line, not pydantic's dump."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        from marin_pipelines.config_errors import describe

        return describe(error)
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
