"""Waiting helpers for UI tests (condition polling, never fixed sleeps alone): :func:`until`
lets a Textual app run while it polls; :func:`wait_until` polls from a test's own thread (a
browser test, a helper talking to the real server)."""

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


def wait_until(check: Callable[[], object], timeout: float = 30.0) -> None:
    """Block until ``check()`` is truthy; fail with a clear message on timeout."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {check}")
        time.sleep(0.05)
