"""Waiting helpers for asynchronous UI tests (condition polling, never fixed sleeps alone)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.pilot import Pilot


async def until(pilot: Pilot[Any], check: Callable[[], object], timeout: float = 30.0) -> None:
    """Let the app run until ``check()`` is truthy; fail with a clear message on timeout."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {check}")
        await pilot.pause(0.05)
