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
    "checkpoint_info",
    "export_hf",
    "eval",
    "fit_scaling_law",
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
    # bad input (ExperimentError is a ValueError): a message, not a traceback
    except (FileNotFoundError, ValueError) as e:
        print(f"marin-pipelines: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
