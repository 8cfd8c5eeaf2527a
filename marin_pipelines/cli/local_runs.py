"""How a command that materialises steps in this process talks to the user: the steps' progress on the
terminal, and the user's own error out of Dagster's wrappers."""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager


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
