"""Program ids the store already holds, so that an id never passes to a second tenant.

A program leaves memory (retention, a restart) but stays in the store. A call that names its
id must not open a new program over it for another tenant: the new program would take the
stored one over, its old nodes included, and lock its owner out. So before an id that is not
in memory is opened, its stored owner is looked up. Most new ids are new everywhere, and a
DuckDB query for each (a scan: the table has no index) would sit on the path of every first
call of a program, so a Bloom filter of the stored ids answers "certainly not stored" from
memory; only its positives (the stored ids and ~1% of the others) are looked up.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Callable, Iterable

#: Bits per id and hash count for a false-positive rate of about 1%.
_BITS_PER_ID = 10
_HASHES = 7


class _Bloom:
    """A fixed-size Bloom filter sized for ``capacity`` ids."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.count = 0
        self._bits = bytearray(max(1, capacity * _BITS_PER_ID // 8))
        self._size = len(self._bits) * 8

    def _positions(self, key: str) -> list[int]:
        digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
        first, second = int.from_bytes(digest[:8]), int.from_bytes(digest[8:]) | 1
        return [(first + i * second) % self._size for i in range(_HASHES)]

    def add(self, key: str) -> None:
        for position in self._positions(key):
            self._bits[position >> 3] |= 1 << (position & 7)
        self.count += 1

    def __contains__(self, key: str) -> bool:
        return all(self._bits[p >> 3] & (1 << (p & 7)) for p in self._positions(key))

    @property
    def false_positive_rate(self) -> float:
        """The expected share of never-added keys it claims, at its present fill."""
        return (1 - math.exp(-_HASHES * self.count / self._size)) ** _HASHES


class StoredNames:
    """Which names (program ids, tenants' idempotency keys) may be in the store: "certainly
    not" from memory for a name never added, "maybe" for the added ones and ~1% of the rest.

    The filter grows by adding a filter twice the size of the last when that one is full, so
    it never answers "not stored" for an added name.
    """

    def __init__(self, stored: Iterable[str] = (), capacity: int = 100_000) -> None:
        self._filters = [_Bloom(capacity)]
        for name in stored:
            self.add(name)

    def add(self, name: str) -> None:
        """Remember that ``name`` is (or is about to be) in the store."""
        last = self._filters[-1]
        if last.count >= last.capacity:
            last = _Bloom(last.capacity * 2)
            self._filters.append(last)
        last.add(name)

    def may_hold(self, name: str) -> bool:
        """False only if ``name`` was never added."""
        return any(name in bloom for bloom in self._filters)

    @property
    def false_positive_bound(self) -> float:
        """The filter's current false-positive rate, at most (the filters' sum)."""
        return sum(bloom.false_positive_rate for bloom in self._filters)


class StoredIds(StoredNames):
    """Which program ids may be in the store (:class:`StoredNames`), and their owner when
    they are.

    ``lookup(program_id)`` returns the stored owner (tenant) or ``None``; it is a blocking
    store read and runs in a thread.
    """

    def __init__(
        self,
        lookup: Callable[[str], str | None],
        stored: Iterable[str] = (),
        capacity: int = 100_000,
    ) -> None:
        super().__init__(stored, capacity)
        self._lookup = lookup

    async def owner(self, program_id: str) -> str | None:
        """The tenant the store holds ``program_id`` for, or ``None``."""
        if not self.may_hold(program_id):
            return None
        return await asyncio.to_thread(self._lookup, program_id)
