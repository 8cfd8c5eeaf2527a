"""The system tier (tests/tiers.py): real servers (Postgres, Ray, the storage emulator), kills, secrets, runs
of many processes."""

from tiers import mark_tier


def pytest_collection_modifyitems(items) -> None:
    mark_tier(items, __file__)
