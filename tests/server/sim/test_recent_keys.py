"""The computed-key memory behind the simulator's recompute count (``sim/recentkeys.py``)."""

from __future__ import annotations

import pytest

from agentconsole.server.runtime.sim.recentkeys import RecentKeys


def test_unbounded_it_remembers_every_key() -> None:
    keys = RecentKeys()
    keys.update(range(10_000))
    assert all(k in keys for k in range(10_000))


def test_bounded_it_keeps_the_last_one_or_two_generations() -> None:
    keys = RecentKeys(limit=3)
    keys.update(["a", "b"])
    keys.update(["c"])  # the generation is full: it becomes the previous one
    keys.update(["d", "e"])
    assert all(k in keys for k in "abcde")
    keys.update(["f"])  # full again: a, b and c are forgotten
    assert [k in keys for k in "abcdef"] == [False, False, False, True, True, True]


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        RecentKeys(limit=0)
