"""Serve's logging: a checked level, and the in-process HTTP clients' request lines kept out
of the log unless asked for (the server's access log already has each request)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from agentconsole.serve import CLIENT_LOGGERS, configure_logging
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
