"""Fixtures for the store tests: a fresh store on a real DuckDB file in ``tmp_path``, with
DuckDB in this process and in a database process of its own (what ``serve`` runs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentconsole.server.store import Store, StoreConfig


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the test's database lives (not created yet)."""
    return tmp_path / "store.duckdb"


@pytest.fixture(params=[False, True], ids=["in-process", "db-process"])
def store(db_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    """An open store, closed (drained and checkpointed) after the test; DuckDB in this
    process, then in a process of its own (``StoreConfig.own_process``)."""
    opened = Store.open(db_path, StoreConfig(own_process=request.param))
    try:
        yield opened
    finally:
        opened.close()
