"""Reading an event's data (or a stored row's JSON data, the same values): a number that may
be missing or not a number at all, as an older event or a hand-edited row leaves it."""

from __future__ import annotations

from collections.abc import Mapping

_NUMBER = (int, float)  # a tuple: ``int | float`` would build a union at every call


def number(data: Mapping[str, object], key: str) -> float:
    """``data[key]`` as a float; 0.0 when it is missing or not a number."""
    value = data.get(key)
    return float(value) if isinstance(value, _NUMBER) else 0.0


def token_count(data: Mapping[str, object], key: str) -> int | None:
    """``data[key]`` as a positive count of tokens; None when it is missing or is none (a
    bool is an int in Python, but no count)."""
    value = data.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
