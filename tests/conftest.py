"""Shared fixtures: real web data from ../shared/data beside the project, when present."""

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real web data not found at {SHARED_DATA}")
    return SHARED_DATA
