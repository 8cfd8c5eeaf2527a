"""The Dagster instance a command-line run lands in: the one the UI shows, never a throwaway one.

``DAGSTER_HOME`` names it; unset, the project folder the command runs in (its ``dagster.yaml``, which `make
ui` and `make demo` use) is the instance, as ``.marin/store`` under it is the store. A run made anywhere
else would be invisible to the UI, so without either the command stops and says how to name one.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import DagsterInstance

HOME = "DAGSTER_HOME"
INSTANCE_FILE = "dagster.yaml"


class NoInstanceError(ValueError):
    """No persistent Dagster instance to run in (a ValueError: the command line prints it as one line)."""


def project_instance() -> DagsterInstance:
    """``DAGSTER_HOME``'s instance, else the working directory's when it holds ``dagster.yaml`` (then
    ``DAGSTER_HOME`` is set to it, so that the launched children and runs find the same one)."""
    home = os.environ.get(HOME)
    if not home:
        here = Path.cwd()
        if not (here / INSTANCE_FILE).is_file():
            raise NoInstanceError(
                f"no Dagster instance to record this run in: {HOME} is unset and {here} has no "
                f"{INSTANCE_FILE}; run from the project folder (where `make ui` runs) or set {HOME} to "
                "the folder of the instance the UI uses"
            )
        os.environ[HOME] = home = str(here)
    try:
        return DagsterInstance.get()
    except Exception as error:  # a broken dagster.yaml, storage that cannot be opened: say which instance
        raise NoInstanceError(f"cannot open the Dagster instance in {home} ({HOME}): {error}") from error
