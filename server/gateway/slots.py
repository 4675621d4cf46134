"""A fixed number of slots shared fairly between tenants (the sandbox's ``max_parallel``).

The rule: a free slot is taken at once when no call waits; a slot that frees while calls wait
goes to the waiting tenant that holds the fewest slots, ties to the tenant served least
recently, and within a tenant to its oldest call. So a tenant that waits while holding no slot
gets the next slot that frees, unless another tenant holding none waited for one too (then
they take turns): one tenant's backlog never keeps another out for longer than one run per
tenant served before it, however many calls it queues. With ``per_tenant``, a tenant holding
that many waits even while slots are free: slots held for a long time (a downstream that never
answers) then leave the others room.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import count


class FairSlots:
    """``size`` slots; :meth:`hold` one for a tenant. Single event loop, no thread safety."""

    def __init__(self, size: int, per_tenant: int | None = None) -> None:
        self._free = size
        self._cap = size if per_tenant is None else max(1, min(per_tenant, size))
        self._held: Counter[str] = Counter()
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._served_at: dict[str, int] = {}
        self._ticks = count(1)

    def held(self, tenant: str) -> int:
        """How many slots ``tenant`` holds now."""
        return self._held[tenant]

    @asynccontextmanager
    async def hold(self, tenant: str) -> AsyncIterator[None]:
        """Wait for a slot (see the module docstring) and hold it for the block."""
        await self._acquire(tenant)
        try:
            yield
        finally:
            self._release(tenant)

    async def _acquire(self, tenant: str) -> None:
        """Take a slot for ``tenant``, waiting in its queue when none is free or others wait."""
        if self._free and not self._waiting and self._held[tenant] < self._cap:
            self._grant(tenant)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(waiter)
        self._hand_out()  # a free slot the waiters ahead may not take (each at its cap)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(tenant)  # granted as the caller went away: hand it on
            else:
                self._forget(tenant, waiter)
            raise

    def _grant(self, tenant: str) -> None:
        self._free -= 1
        self._held[tenant] += 1
        self._served_at[tenant] = next(self._ticks)

    def _release(self, tenant: str) -> None:
        """Give ``tenant``'s slot back and hand free slots to the waiters, fairest first."""
        self._held[tenant] -= 1
        if not self._held[tenant]:
            del self._held[tenant]
        self._free += 1
        self._hand_out()

    def _hand_out(self) -> None:
        """Give the free slots to the waiters, fairest first, each tenant up to its cap."""
        while self._free:
            eligible = [t for t in self._waiting if self._held[t] < self._cap]
            if not eligible:
                return
            chosen = min(eligible, key=self._priority)
            waiter = self._waiting[chosen].popleft()
            if not self._waiting[chosen]:
                del self._waiting[chosen]
            if not waiter.cancelled():
                self._grant(chosen)
                waiter.set_result(None)

    def _priority(self, tenant: str) -> tuple[int, int]:
        """Fewest slots held first, then least recently served (never served: first)."""
        return self._held[tenant], self._served_at.get(tenant, 0)

    def _forget(self, tenant: str, waiter: asyncio.Future[None]) -> None:
        """Drop a cancelled waiter from its tenant's queue."""
        queue = self._waiting.get(tenant)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[tenant]
