"""``store.memory_limit`` (DuckDB's buffer pool bound) goes from the settings to the store the
server opens: the server's memory grows with the store only up to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentconsole.server.store import Store
from agentconsole.settings import load_settings
from tests.server.api.harness import LiveServer, make_config


def _limit_mib(store: Store) -> float:
    """DuckDB's memory limit as it reports it (``'244.1 MiB'``, ``'1.8 GiB'``), in MiB."""
    with store.cursor() as con:
        row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert row is not None
    number, unit = str(row[0]).split()
    return float(number) * {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}[unit]


def test_the_setting_reaches_the_server_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().server_config().store_memory_limit == "1GB"
    monkeypatch.setenv("AGENTCONSOLE_STORE__MEMORY_LIMIT", "256MB")
    assert load_settings().server_config().store_memory_limit == "256MB"


@pytest.mark.parametrize("value", ["lots", "256", "-1GB", "1 parsec"])
def test_a_limit_duckdb_would_not_read_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="memory_limit"):
        load_settings(overrides={"store": {"memory_limit": value}})


def test_the_server_opens_its_store_with_the_limit(tmp_path: Path) -> None:
    config = make_config(tmp_path / "limit.duckdb", store_memory_limit="256MB")
    with LiveServer(config) as server:
        limit = _limit_mib(server.live.store)
    assert limit == pytest.approx(256e6 / 2**20, rel=0.01)  # DuckDB's MB is 10^6 bytes
