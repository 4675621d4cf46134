"""Fixtures: one shared server for the read-mostly API tests (fresh DuckDB file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.api.harness import LiveServer, make_config


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("api")) / "api.duckdb"
    with LiveServer(make_config(db)) as live:
        live.wait_ready()
        yield live
