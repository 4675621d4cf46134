"""The real-engine replay's summary (``outcome_summary``), on hand-made outcomes."""

from __future__ import annotations

import pytest

from agentconsole.server.runtime.sglang.replay import ProgramOutcome, outcome_summary


def _ended(
    pid: str, e2e_s: float, *, success: bool = True, cancelled: bool = False
) -> ProgramOutcome:
    return ProgramOutcome(pid, "t", "serial", e2e_s, success, 2, 100, 40, cancelled=cancelled)


def test_the_summary_counts_the_traces_cancels_apart_from_the_finished() -> None:
    """A program the trace's own cancel ended is neither finished nor a failure of the
    serving: it is counted apart, and its E2E is in no percentile."""
    summary = outcome_summary(
        [
            _ended("a", 1.0),
            _ended("b", 3.0),
            _ended("c", 50.0, success=False, cancelled=True),
            _ended("d", 9.0, success=False),  # failed: neither finished nor cancelled
        ]
    )
    assert (summary["programs"], summary["finished"], summary["cancelled"]) == (4, 2, 1)
    assert summary["e2e_mean_s"] == pytest.approx(2.0)
    assert summary["cache_hit_rate"] == pytest.approx(0.4)


def test_the_summary_s_percentiles_interpolate_and_are_0_with_none_finished() -> None:
    summary = outcome_summary([_ended("a", 1.0), _ended("b", 3.0)])
    assert (summary["e2e_p50_s"], summary["e2e_p95_s"]) == pytest.approx((2.0, 2.9))
    nothing = outcome_summary([_ended("c", 5.0, success=False)])
    assert (nothing["e2e_p50_s"], nothing["e2e_p95_s"], nothing["e2e_mean_s"]) == (0, 0, 0)
