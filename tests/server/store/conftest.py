"""Fixtures for the store tests: a fresh store on a real DuckDB file in ``tmp_path``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentconsole.server.store import Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the test's database lives (not created yet)."""
    return tmp_path / "store.duckdb"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """An open store, closed (drained and checkpointed) after the test."""
    opened = Store.open(db_path)
    try:
        yield opened
    finally:
        opened.close()
