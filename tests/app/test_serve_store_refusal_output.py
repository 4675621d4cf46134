"""A start-up the store refused in the lifespan (a damaged block only start-up's first reads
meet) prints the refusal as one line, ``serve``'s own: stderr holds the banner, the lines
uvicorn logs at the level asked for while starting, and that line; exit 2.

Before: uvicorn's "ERROR:    Application startup failed. Exiting." came first, a second error
line that says only that something failed."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from agentconsole.serve import banner
from agentconsole.settings import load_settings
from tests.app.test_serve_damaged_store import _store_with_programs, serve_sim_on
from tests.server.store.store_helpers import corrupt_a_block_of

#: what uvicorn logs at INFO before the lifespan's start-up runs (its process id varies)
UVICORN_STARTING = [
    r"INFO:     Started server process \[\d+\]",
    r"INFO:     Waiting for application startup\.",
]


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose ``programs`` table has a damaged block (shared: serve leaves the files
    as they were, which ``test_serve_damaged_store`` checks)."""
    db = tmp_path_factory.mktemp("damaged") / "store.duckdb"
    _store_with_programs(db)
    corrupt_a_block_of(db, "programs")
    return db


@pytest.mark.parametrize(
    ("log_level", "starting"),
    [("warning", []), ("info", UVICORN_STARTING)],
    ids=["warning", "info"],
)
def test_a_store_refused_start_up_says_so_in_exactly_one_line(
    damaged_store: Path,
    tmp_path: Path,
    log_level: str,
    starting: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = damaged_store
    for name in [name for name in os.environ if name.startswith("AGENTCONSOLE_")]:
        monkeypatch.delenv(name)  # the banner expected below is read from the same settings
    serve = serve_sim_on(db, tmp_path, log_level=log_level)
    assert serve.returncode == 2, serve.stderr
    assert serve.stdout == ""
    overrides = {"runtime": {"name": "sim"}, "server": {"port": 0}, "store": {"db": db}}
    banner_lines = banner(load_settings(None, overrides)).splitlines()
    lines = serve.stderr.splitlines()
    assert lines[: len(banner_lines)] == banner_lines, serve.stderr
    after_banner = lines[len(banner_lines) :]
    refusal = (
        rf"Error: store {re.escape(str(db))} \(or its event log\) is damaged: Corrupt .*"
        r"restore from a backup or the last Parquet export\."
    )
    expected = [*starting, refusal]
    assert len(after_banner) == len(expected), serve.stderr
    for line, pattern in zip(after_banner, expected, strict=True):
        assert re.fullmatch(pattern, line), (line, serve.stderr)
