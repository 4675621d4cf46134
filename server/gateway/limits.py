"""Per-tenant, per-tool limits (tool concurrency): a token-bucket rate limit and a concurrency
cap.

State is in memory (one process serves the API), keyed by ``(tenant, tool)``, and measured
on the monotonic clock so a wall-clock step never opens or closes the gate. A refused call
consumes nothing. Both limits are checked before the arguments are validated (research §3.4
pipeline order), so floods of malformed calls are throttled too.

A bucket refilled to full is the same as none (a new one starts full), so dropping it resets
no limit: a deleted tool's full bucket is dropped at its delete, and full buckets are swept
when the map outgrows a bound. Without that, registering, calling and deleting fresh names
(``DELETE /v1/tools/{name}`` lifts the per-tenant tool cap) would grow the map without end. A
bucket not yet full is kept, deleted tool or not, so a delete and re-register resets nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentconsole.server.gateway.errors import RateLimited

Clock = Callable[[], float]

#: buckets held before a sweep drops the full ones (the next sweep waits for twice what a
#: sweep left, so sweeps cost amortized O(1) per new bucket)
SWEEP_AT = 4096


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float
    #: the rate and size it was last taken from: what "refilled to full" means for it
    rate: float
    size: float

    def full(self, now: float) -> bool:
        """Refilled to its size by ``now``: the same as a new bucket."""
        return self.tokens + (now - self.updated) * self.rate >= self.size


@dataclass(slots=True)
class ToolLimits:
    """Rate limits and concurrency caps for every ``(tenant, tool)`` pair."""

    clock: Clock = time.monotonic
    sweep_at: int = SWEEP_AT
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    _running: dict[tuple[str, str], int] = field(default_factory=dict)
    _next_sweep: int = 0

    def admit(
        self,
        tenant: str,
        tool: str,
        *,
        rate_per_s: float | None,
        burst: int | None,
        max_concurrency: int | None,
    ) -> None:
        """Take one rate token and one concurrency slot for ``tenant`` calling ``tool``.

        ``burst`` is the bucket size (default ``max(1, ceil(rate_per_s))``); ``None`` limits
        mean unlimited. Raises :class:`RateLimited` (429, with ``Retry-After`` in whole
        seconds when the rate will allow the call) and takes nothing then. The caller must
        call :meth:`release` exactly once after an admitted call.
        """
        key = (tenant, tool)
        running = self._running.get(key, 0)
        if max_concurrency is not None and running >= max_concurrency:
            raise RateLimited(
                f"tool {tool!r} already runs {running} calls for this tenant"
                f" (limit {max_concurrency})",
                headers={"Retry-After": "1"},
                extra={"limit": "concurrency"},
            )
        if rate_per_s is not None:
            self._take_token(key, tool, rate_per_s, burst)
        self._running[key] = running + 1

    def _take_token(self, key: tuple[str, str], tool: str, rate: float, burst: int | None) -> None:
        size = float(burst if burst is not None else max(1, math.ceil(rate)))
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= max(self.sweep_at, self._next_sweep):
                self._sweep(now)
            bucket = self._buckets[key] = _Bucket(size, now, rate, size)
        bucket.tokens = min(size, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated, bucket.rate, bucket.size = now, rate, size
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / rate
            raise RateLimited(
                f"rate limit of {rate:g} calls/s for tool {tool!r} exceeded",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
                extra={"limit": "rate"},
            )
        bucket.tokens -= 1.0

    def _sweep(self, now: float) -> None:
        """Drop every full bucket (none of them limits anything a new one would not)."""
        for key in [k for k, bucket in self._buckets.items() if bucket.full(now)]:
            del self._buckets[key]
        self._next_sweep = 2 * len(self._buckets)

    def tool_deleted(self, owner: str, tool: str) -> None:
        """Forget the rate buckets of a deleted tool that have refilled to full: ``owner``'s
        (the tenant that owned it), every tenant's for a platform tool (``owner`` ``""``). A
        bucket not yet full stays, so deleting and registering the name again resets no
        limit."""
        now = self.clock()
        keys = [(owner, tool)] if owner else [k for k in self._buckets if k[1] == tool]
        for key in keys:
            bucket = self._buckets.get(key)
            if bucket is not None and bucket.full(now):
                del self._buckets[key]

    def buckets(self) -> int:
        """Rate buckets held (memory the limits keep)."""
        return len(self._buckets)

    def release(self, tenant: str, tool: str) -> None:
        """Give back the concurrency slot an admitted call held."""
        key = (tenant, tool)
        left = self._running.get(key, 0) - 1
        if left > 0:
            self._running[key] = left
        else:
            self._running.pop(key, None)

    def running(self, tenant: str, tool: str) -> int:
        """Calls of ``tool`` by ``tenant`` admitted and not yet released."""
        return self._running.get((tenant, tool), 0)
