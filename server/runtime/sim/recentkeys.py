"""The block keys an engine has computed, to tell a recompute (computed before, evicted since)
from a first computation; optionally bounded for a server that runs for weeks.

Unbounded (a ``bench`` run, finite by construction) it is a set. Bounded, it keeps two
generations: when the current one reaches ``limit`` keys it becomes the previous one and the
one before is dropped, so between ``limit`` and ``2 * limit`` of the most recent keys are
remembered and a prefill of a block last computed longer ago counts as a first computation.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class RecentKeys:
    """``add``/``in`` over the most recent keys (all of them when ``limit`` is None)."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self._current: set[Hashable] = set()
        self._previous: set[Hashable] = set()

    def __contains__(self, key: object) -> bool:
        return key in self._current or key in self._previous

    def update(self, keys: Iterable[Hashable]) -> None:
        """Remember ``keys`` as computed now (may forget the oldest generation)."""
        self._current.update(keys)
        if self.limit is not None and len(self._current) >= self.limit:
            self._previous, self._current = self._current, set()
