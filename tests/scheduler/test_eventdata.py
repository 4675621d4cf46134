"""A number read from event data or a stored row's JSON."""

from __future__ import annotations

from agentconsole.scheduler.eventdata import number


def test_a_number_or_zero() -> None:
    data: dict[str, object] = {"i": 3, "f": 1.5, "flag": True, "s": "7", "none": None}
    assert number(data, "i") == 3.0
    assert isinstance(number(data, "i"), float)
    assert number(data, "f") == 1.5
    assert number(data, "flag") == 1.0  # a bool is an int, as before the fold
    assert number(data, "s") == 0.0
    assert number(data, "none") == 0.0
    assert number(data, "missing") == 0.0
