"""The blocks an engine has computed, to tell a recompute (computed before, evicted since)
from a first computation; optionally bounded for a server that runs for weeks.

A block is remembered with the key of the block before it: its KV depends on everything before
it, so the same block computed after another one (a compaction that starts a fresh context
with the last tool result, an insertion before it) is new KV, not a recompute. One position per
key is remembered, the latest: a block computed at two places counts as recomputed at the
latest only (the simulator's segments are unique per place but for such continuations).

Unbounded (a ``bench`` run, finite by construction) it is one dict. Bounded, it keeps two
generations: when the current one reaches ``limit`` keys it becomes the previous one and the
one before is dropped, so between ``limit`` and ``2 * limit`` of the most recent keys are
remembered and a prefill of a block last computed longer ago counts as a first computation.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

_UNSEEN = object()  # the predecessor of a key never computed (None: first in its context)


class RecentKeys:
    """``remember``/``computed_after`` over the most recent keys (all when ``limit`` is None)."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self._current: dict[Hashable, Hashable | None] = {}
        self._previous: dict[Hashable, Hashable | None] = {}

    def computed_after(self, key: Hashable, before: Hashable | None) -> bool:
        """Whether ``key`` was computed right after ``before`` (None: first in its context)."""
        got = self._current.get(key, _UNSEEN)
        if got is _UNSEEN:
            got = self._previous.get(key, _UNSEEN)
        return got == before

    def remember(self, keys: Iterable[Hashable]) -> None:
        """Remember the blocks of one context, ``keys`` in order from its start, as computed
        now (may forget the oldest generation)."""
        current = self._current
        before: Hashable | None = None
        for key in keys:
            current[key] = before
            before = key
        if self.limit is not None and len(current) >= self.limit:
            self._previous, self._current = current, {}
