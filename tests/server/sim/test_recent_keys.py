"""The computed-block memory behind the simulator's recompute count (``sim/recentkeys.py``)."""

from __future__ import annotations

import pytest

from agentconsole.server.runtime.sim.recentkeys import RecentKeys


def test_unbounded_it_remembers_every_block_after_its_predecessor() -> None:
    keys = RecentKeys()
    keys.remember(range(10_000))
    assert keys.computed_after(0, None)
    assert all(keys.computed_after(k, k - 1) for k in range(1, 10_000))
    assert not keys.computed_after(10_000, 9_999)


def test_a_block_computed_after_another_block_is_new_kv() -> None:
    """A compaction starts a fresh context with the last tool result: that block after the
    summary is KV never computed, though the same block was computed after the old history."""
    keys = RecentKeys()
    keys.remember(["system", "history", "tool-result"])
    assert keys.computed_after("tool-result", "history")
    assert not keys.computed_after("tool-result", "summary")
    assert not keys.computed_after("system", "other")  # the context's first block follows None
    keys.remember(["system", "summary", "tool-result"])  # the latest place is remembered
    assert keys.computed_after("tool-result", "summary")


def test_bounded_it_keeps_the_last_one_or_two_generations() -> None:
    keys = RecentKeys(limit=3)
    keys.remember(["a", "b"])
    keys.remember(["c"])  # the generation is full: it becomes the previous one
    keys.remember(["d", "e"])
    places = [("a", None), ("b", "a"), ("c", None), ("d", None), ("e", "d")]
    assert all(keys.computed_after(k, before) for k, before in places)
    keys.remember(["f"])  # full again: a, b and c are forgotten
    known = [keys.computed_after(k, before) for k, before in [*places, ("f", None)]]
    assert known == [False, False, False, True, True, True]


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        RecentKeys(limit=0)
