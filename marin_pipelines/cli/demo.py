"""`marin-pipelines demo`: the demo, its z-loss ablation and its fine-tuning (which share every data step; the
fine-tuning also the demo's run), materialised in this process, each followed by its summary."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

DEMO = ("demo", "zloss_ablation", "sft_demo")


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="materialise the demo, its z-loss ablation and its SFT here, then summarise"
    )
    demo.add_argument("--warc-root", help="folder of WARC/ARC files (default: build the embedded demo crawl)")
    demo.add_argument("--store-root", default=None, help="where outputs go (default: .marin/store)")
    demo.add_argument(
        "--experiment",
        action="append",
        help=f"run this experiment instead (repeatable; default: {', '.join(DEMO)})",
    )
    demo.set_defaults(run=lambda args: run_demo(args.warc_root, args.store_root, args.experiment))


def run_demo(warc_root: str | None, store_root: str | None, names: list[str] | None = None) -> int:
    if warc_root:  # read by the demo's crawl step when the experiments are imported
        os.environ["MARIN_WARC_ROOT"] = warc_root
    from marin_pipelines.cli.experiment import run_experiments

    return run_experiments(names or list(DEMO), store_root)


@contextmanager
def progress_to_stderr() -> Iterator[None]:
    """Show the steps' progress lines on the terminal for this run only (not a global logging setup)."""
    from dagster import BetaWarning, PreviewWarning

    package = logging.getLogger("marin_pipelines")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level, propagate = package.level, package.propagate
    package.addHandler(handler)
    package.setLevel(logging.INFO)
    package.propagate = False  # some libraries configure the root logger on import: print once
    try:
        with warnings.catch_warnings():  # Dagster's notes on its preview APIs are for us, not the user
            warnings.simplefilter("ignore", PreviewWarning)
            warnings.simplefilter("ignore", BetaWarning)
            yield
    finally:
        package.removeHandler(handler)
        package.setLevel(level)
        package.propagate = propagate


def root_cause(error: BaseException) -> BaseException:
    """The user's error inside Dagster's wrappers (a step's ``Failure`` raised from it: that error)."""
    from dagster import Failure

    user = getattr(error, "user_exception", None)
    while user is None and error.__cause__ is not None:
        error = error.__cause__
        user = getattr(error, "user_exception", None)
    cause = user or error
    if isinstance(cause, Failure) and cause.__cause__ is not None:
        return cause.__cause__
    return cause
