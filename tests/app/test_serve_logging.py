"""Serve's logging: a checked level, and the in-process HTTP clients' request lines kept out
of the log unless asked for (the server's access log already has each request); the app keeps
the level and the one format ``configure_logging`` set, through its start-up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from agentconsole.serve import (
    CLIENT_LOGGERS,
    LOG_FORMAT,
    Listener,
    configure_logging,
    make_server,
    tui_log_path,
)
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.api.connections import HttpLimits
from agentconsole.server.app import create_app
from agentconsole.settings import load_settings


@pytest.fixture
def client_levels() -> Iterator[None]:
    saved = {name: logging.getLogger(name).level for name in CLIENT_LOGGERS}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("client_levels")
@pytest.mark.parametrize(
    ("level", "clients"),
    [("info", logging.WARNING), ("warning", logging.WARNING), ("debug", logging.DEBUG),
     ("trace", 5), ("TRACE", 5), ("error", logging.ERROR), ("critical", logging.CRITICAL)],
)  # fmt: skip
def test_client_request_lines_only_at_debug_and_never_below_the_level(
    level: str, clients: int
) -> None:
    configure_logging(level)
    assert all(logging.getLogger(name).level == clients for name in CLIENT_LOGGERS)


def test_log_level_is_checked_and_case_blind() -> None:
    assert load_settings(None, {"server": {"log_level": "INFO"}}).server.log_level == "info"
    with pytest.raises(ValidationError, match="log_level"):
        load_settings(None, {"server": {"log_level": "bogus"}})


@contextlib.contextmanager
def bare_root_logger() -> Iterator[logging.Logger]:
    """The root logger without pytest's capture handlers (``basicConfig`` does nothing while
    the root has a handler), and the ``litestar`` logger at no level of its own, as in a fresh
    ``serve`` process (another test's Litestar app with Litestar's default logging set-up, the
    consoles' stub server's, leaves it at INFO); both put back as they were afterwards."""
    root = logging.getLogger()
    litestar = logging.getLogger("litestar")
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_litestar_level = litestar.level
    for handler in saved_handlers:
        root.removeHandler(handler)
    litestar.setLevel(logging.NOTSET)
    try:
        yield root
    finally:
        litestar.setLevel(saved_litestar_level)
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            handler.close()
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)


def formats_reaching(logger: logging.Logger) -> set[str | None]:
    """The format of every handler a record of ``logger`` reaches (through a queue handler's
    listener too); None: a handler without a formatter (the bare message)."""
    handlers: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        handlers.extend(current.handlers)
        current = current.parent if current.propagate else None
    formats: set[str | None] = set()
    while handlers:
        handler = handlers.pop()
        formats.add(handler.formatter._fmt if handler.formatter else None)
        listener = getattr(handler, "listener", None)
        handlers.extend(getattr(listener, "handlers", ()))
    return formats


@pytest.mark.usefixtures("client_levels")
def test_app_start_up_keeps_the_warning_level_and_one_format(tmp_path: Path) -> None:
    config = ServerConfig(
        db_path=tmp_path / "logging.duckdb", runtime="sim", runtime_extra={"time_scale": 0.05}
    )
    ours = logging.getLogger("agentconsole.server.app")

    async def start_and_stop() -> tuple[int, set[str | None]]:
        app = create_app(config)
        async with app.lifespan():
            return ours.getEffectiveLevel(), formats_reaching(ours)

    with bare_root_logger():
        configure_logging("warning")
        level, formats = asyncio.run(start_and_stop())
        assert logging.getLogger("agentconsole").getEffectiveLevel() >= logging.WARNING
        assert logging.getLogger("litestar").getEffectiveLevel() >= logging.WARNING
    assert level >= logging.WARNING
    assert formats == {LOG_FORMAT}
    assert "%(asctime)s" in LOG_FORMAT  # an error line says when


@pytest.mark.usefixtures("client_levels")
def test_with_the_dashboard_every_log_line_goes_to_the_file_not_the_terminal(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``serve --tui``: uvicorn's access log (with ``--demo``, a line a second) was printed on
    top of the dashboard, which holds the terminal."""
    log = tmp_path / "x.serve.log"
    config = ServerConfig(
        db_path=tmp_path / "tui.duckdb", runtime="sim", runtime_extra={"time_scale": 0.05}
    )
    listener = Listener("127.0.0.1", 0, "info", HttpLimits(), log_through_root=True)
    with bare_root_logger():
        configure_logging("info", log)
        server = make_server(config, listener, ())
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        server.should_exit = True
        thread.join(30)
        for handler in logging.getLogger().handlers:
            handler.flush()
    printed = capfd.readouterr()
    assert "GET /health" not in printed.out + printed.err
    assert "GET /health" in log.read_text()
    assert tui_log_path(load_settings(None, {"store": {"db": str(tmp_path / "s.duckdb")}})) == (
        tmp_path / "s.serve.log"
    )
