"""The unit tier (tests/tiers.py): in process, no Dagster, seconds each; `make test-fast` runs it alone."""

import sys

from tiers import DagsterWatch, mark_tier

WATCH = DagsterWatch()
sys.meta_path.insert(0, WATCH)


def pytest_configure(config) -> None:
    config.pluginmanager.register(WATCH, "dagster-watch")


def pytest_collection_modifyitems(items) -> None:
    mark_tier(items, __file__)
