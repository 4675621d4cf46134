"""What one tenant can make the scheduler's learners hold: at most :data:`KEYS_PER_TENANT` keys.

Every learner is keyed by (tenant, key), and the key is the client's to choose (a program's
``workload`` or ``model`` label, a kind of program, a tool's name). A tenant that sent a new
label with every program made each learner allocate for it for good (a remaining-work histogram
is 513 counts, ~4.6 KB: 20,000 labels held ~93 MB). :class:`TenantLru` holds each tenant's keys
apart and evicts the tenant's least recently used key past the cap, so a tenant's flood of
labels evicts only its own oldest keys, never another tenant's. Tenants themselves are bounded
(each has an API key), so the cap bounds the whole.

An evicted key is not lost silently: it is predicted as a key never seen is (each learner's
fallback: its tenant's other keys, or the prior), and learned again from its next ends.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

#: the most keys one tenant's learner holds: a tenant's real workloads, models and tools are
#: tens, so 256 keeps every one of them while capping what a tenant can make a learner hold
#: (its remaining-work histograms: 256 x 4.6 KB, ~1.2 MB)
KEYS_PER_TENANT = 256

V = TypeVar("V")


class TenantLru(Generic[V]):
    """Values per (tenant, key), at most ``limit`` keys per tenant: storing one more evicts
    the tenant's least recently read or stored key. A value is never ``None`` (``get``'s
    answer for a key not held).

    A lookup costs two dict reads and a move to the end: the learners' predictions run per
    scheduling decision, so only the listings (:meth:`values_of`, :meth:`keys_of`,
    :meth:`items`, :meth:`copy`) walk a tenant's keys."""

    __slots__ = ("_tenants", "limit")

    def __init__(self, limit: int = KEYS_PER_TENANT) -> None:
        if limit < 1:
            raise ValueError(f"a tenant must be able to hold a key (limit {limit})")
        self.limit = limit
        self._tenants: dict[str, OrderedDict[str, V]] = {}

    def get(self, tenant: str, key: str) -> V | None:
        """``tenant``'s value of ``key``, now its most recently used (None: not held; a miss
        stores nothing)."""
        keys = self._tenants.get(tenant)
        if keys is None:
            return None
        value = keys.get(key)
        if value is not None:
            keys.move_to_end(key)
        return value

    def put(self, tenant: str, key: str, value: V) -> None:
        """Store ``value`` as ``tenant``'s ``key``, its most recently used; evicts the tenant's
        least recently used key when it holds one more than ``limit``."""
        keys = self._tenants.get(tenant)
        if keys is None:
            keys = self._tenants[tenant] = OrderedDict()
        keys[key] = value
        keys.move_to_end(key)
        if len(keys) > self.limit:
            keys.popitem(last=False)

    def setdefault(self, tenant: str, key: str, make: Callable[[], V]) -> V:
        """``tenant``'s value of ``key`` (now its most recently used), stored from ``make()``
        first when not held (which may evict, as :meth:`put`)."""
        value = self.get(tenant, key)
        if value is None:
            value = make()
            self.put(tenant, key, value)
        return value

    def values_of(self, tenant: str) -> list[V]:
        """``tenant``'s values, least recently used first (recency unchanged)."""
        keys = self._tenants.get(tenant)
        return list(keys.values()) if keys is not None else []

    def keys_of(self, tenant: str) -> list[str]:
        """``tenant``'s keys held, least recently used first (recency unchanged)."""
        keys = self._tenants.get(tenant)
        return list(keys) if keys is not None else []

    def items(self) -> Iterator[tuple[str, str, V]]:
        """(tenant, key, value) of every key held, by tenant, each least recently used first."""
        for tenant, keys in self._tenants.items():
            for key, value in keys.items():
                yield tenant, key, value

    def copy(self) -> TenantLru[V]:
        """An independent copy (the same values, each tenant's recency order kept)."""
        other: TenantLru[V] = TenantLru(self.limit)
        other._tenants = {tenant: OrderedDict(keys) for tenant, keys in self._tenants.items()}
        return other
