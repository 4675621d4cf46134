"""Hypothesis strategies shared by the scheduler's property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from agentconsole.scheduler.ticket import CallTicket


def tickets(**fields: Any) -> st.SearchStrategy[CallTicket]:
    """Tickets over three programs and three tenants with random waits, service and critical
    paths (``call_id`` empty: a test numbers them); ``fields`` add or replace strategies."""
    base: dict[str, Any] = {
        "call_id": st.just(""),
        "program_id": st.sampled_from(["a", "b", "c"]),
        "node_id": st.just("n"),
        "tenant": st.sampled_from(["t1", "t2", "t3"]),
        "arrival": st.floats(0, 100),
        "program_service_s": st.floats(0, 10),
        "program_wait_s": st.floats(0, 50),
        "completed_calls": st.integers(0, 10),
        "remaining_cp_s": st.floats(0, 100),
    }
    return st.builds(CallTicket, **{**base, **fields})
