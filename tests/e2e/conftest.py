"""The end-to-end tier (tests/tiers.py): materialisations through Dagster, and commands run in processes."""

from tiers import mark_tier


def pytest_collection_modifyitems(items) -> None:
    mark_tier(items, __file__)
