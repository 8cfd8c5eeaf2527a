"""The test tiers: each is a folder under tests/, and its conftest marks every test collected under it.

- ``unit``: in process, no Dagster, nothing that trains longer than a few steps: `make test-fast`.
- ``e2e``: materialisations through Dagster and commands run end to end in processes.
- ``system``: servers (Postgres, Ray, the storage emulator), kills, secrets, runs of many processes.

A test in no tier folder is a collection error, so that a tier is always the folder a test sits in.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "e2e", "system")


def mark_tier(items: Iterable[pytest.Item], conftest: str) -> None:
    """Mark the items under the conftest's folder with the tier that folder is named for."""
    folder = Path(conftest).resolve().parent
    marker = getattr(pytest.mark, folder.name)
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(marker)


def check_and_order(items: list[pytest.Item]) -> None:
    """Every test sits in exactly one tier folder; the slowest tiers go first, so that parallel workers
    (pytest-xdist hands out whole files in this order) end together instead of waiting on a long file."""
    strays = sorted({str(item.path.relative_to(TESTS)) for item in items if tier_of(item) is None})
    if strays:
        raise pytest.UsageError(f"tests outside the tier folders {TIERS}: {', '.join(strays)}")
    items.sort(key=lambda item: -TIERS.index(tier_of(item)))  # stable: file order kept within a tier


def tier_of(item: pytest.Item) -> str | None:
    tiers = [mark.name for mark in item.iter_markers() if mark.name in TIERS]
    return tiers[0] if len(tiers) == 1 else None


class DagsterWatch(importlib.abc.MetaPathFinder):
    """Remembers which test (or which module's collection) first imported Dagster, so that the unit tier,
    which must not need it, fails naming the test that did. Only telling while nothing else imported it
    first: `make test-fast` runs the unit tier alone."""

    def __init__(self) -> None:
        self.current: tuple[str, Path | None] = ("startup", None)  # node id and path
        self.first = ("before the tests", None) if "dagster" in sys.modules else None

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "dagster" and self.first is None:
            self.first = self.current
        return None  # never imports anything itself

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        self.current = (collector.nodeid, collector.path)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        where, path = self.first or ("", None)
        if path is not None and path.is_relative_to(TESTS / "unit"):
            raise pytest.UsageError(f"{where} imports Dagster: a unit test must not; move it to tests/e2e")

    @pytest.hookimpl(tryfirst=True)  # before the fixtures are set up: they may import it
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.current = (item.nodeid, item.path)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if self.first == (item.nodeid, item.path) and call.when != "teardown" and tier_of(item) == "unit":
            self.first = ("reported", None)
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid} imported Dagster: a unit test must not; move it to tests/e2e"
        return report
