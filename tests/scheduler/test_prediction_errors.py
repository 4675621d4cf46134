"""The prediction log's error statistics: a relative error only where the actual is not 0."""

from __future__ import annotations

import pytest

from agentconsole.scheduler.estimators import PredictionLog


def test_an_actual_of_zero_counts_in_the_absolute_error_but_not_the_relative() -> None:
    """A call that generated nothing (or a program with no call left) has no relative error:
    dividing by a floor of 1e-9 made the mean of one such billions, in bench's report and the
    live view."""
    log = PredictionLog()
    log.record("output_tokens", 300.0, 200.0)
    log.record("output_tokens", 256.0, 0.0)
    summary = log.summary()["output_tokens"]
    assert summary["count"] == 2
    assert summary["mean_abs_error"] == pytest.approx((100 + 256) / 2)
    assert summary["mean_rel_error"] == pytest.approx(0.5)
    assert summary["bias"] == pytest.approx((100 + 256) / 2)
    only_zero = PredictionLog()
    only_zero.record("remaining_calls", 3.0, 0.0)
    assert only_zero.summary()["remaining_calls"]["mean_rel_error"] == 0.0
