"""Shared fixtures: a hand-written program that uses every field of the trace format."""

from __future__ import annotations

from typing import Any

import pytest

from agentconsole.sample_traces import TraceProgram, parse_program
from tests.sample_traces.trace_cases import handmade


@pytest.fixture
def program_dict() -> dict[str, Any]:
    """A fresh, valid program line (tests may mutate it)."""
    return handmade()


@pytest.fixture
def program() -> TraceProgram:
    """The hand-written program, parsed."""
    return parse_program(handmade())
