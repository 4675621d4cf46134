"""Fixtures of the CLI tests: ``no_runs``, for checks that must refuse before any run."""

from __future__ import annotations

from typing import Any

import pytest

from agentconsole.bench import command


class _NoPool:
    """Stands in for the process pool where a check must refuse before any run starts."""

    def __init__(self, *_: Any, **__: Any) -> None:
        raise AssertionError("a run started before the options were checked")


@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench`` may check its options but start no run (a run fails the test)."""
    monkeypatch.setattr(command, "ProcessPoolExecutor", _NoPool)
