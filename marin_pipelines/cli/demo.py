"""`marin-pipelines demo`: materialise a whole experiment (the demo, or its Datashop variant) in this
process and summarise it."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

EXPERIMENTS = ("demo", "datashop")


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="materialise the whole demo graph here, then summarise")
    demo.add_argument("--warc-root", help="folder of WARC/ARC files (default: build the embedded demo crawl)")
    demo.add_argument("--store-root", default=None, help="where outputs go (default: .marin/store)")
    demo.add_argument(
        "--experiment",
        choices=EXPERIMENTS,
        default="demo",
        help="demo, or datashop: the demo with LM-labelled examples training the quality classifier",
    )
    demo.set_defaults(run=lambda args: run_demo(args.warc_root, args.store_root, args.experiment))


def run_demo(warc_root: str | None, store_root: str | None, name: str = "demo") -> int:
    from dagster import DagsterInstance

    from marin_pipelines.experiment import default_store_root
    from marin_pipelines.experiments.datashop import datashop
    from marin_pipelines.experiments.demo import demo
    from marin_pipelines.jobs.local import materialize_experiment
    from marin_pipelines.summary import experiment_summary

    experiment = {"demo": demo, "datashop": datashop}[name](warc_root)
    instance = DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral()
    started = time.time()

    try:
        with progress_to_stderr():
            run = materialize_experiment(experiment, store_root, instance)
    except Exception as e:  # a failed step: say what failed and why, not Dagster's wrapper around it
        cause = _root_cause(e)
        print(f"marin-pipelines: demo failed: {type(cause).__name__}: {cause}", file=sys.stderr)
        return 1
    print(experiment_summary(experiment, store_root or default_store_root(), run, time.time() - started))
    return 0 if run.checks_passed else 1


@contextmanager
def progress_to_stderr() -> Iterator[None]:
    """Show the stages' progress lines on the terminal for this run only (not a global logging setup)."""
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


def _root_cause(error: BaseException) -> BaseException:
    user = getattr(error, "user_exception", None)
    while user is None and error.__cause__ is not None:
        error = error.__cause__
        user = getattr(error, "user_exception", None)
    return user or error
