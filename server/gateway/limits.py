"""Per-tenant, per-tool limits (tool concurrency): a token-bucket rate limit and a concurrency
cap.

State is in memory (one process serves the API), keyed by ``(tenant, owner, tool)``: the
tenant calling, and the tool as it resolved (its owner, ``""`` for a platform tool, and its
name). A tenant's own tool and the platform tool of the same name it shadows are two tools with
two buckets, so nothing a tenant does to its own tools (calling, replacing, deleting one)
touches the limits an operator's tool puts on it. Measured on the monotonic clock so a
wall-clock step never opens or closes the gate. A refused call consumes nothing. Both limits
are checked before the arguments are validated (research §3.4 pipeline order), so floods of
malformed calls are throttled too.

A deleted tool's buckets are dropped at its delete, full or not, so registering, calling and
deleting fresh names (``DELETE /v1/tools/{name}`` lifts the per-tenant tool cap) grows nothing.
A bucket refilled to full is the same as none (a new one starts full), so full buckets are also
swept when the map outgrows a bound (many tenants calling many platform tools).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentconsole.server.gateway.errors import RateLimited

Clock = Callable[[], float]

#: (calling tenant, the tool's owner, the tool's name)
_Key = tuple[str, str, str]

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
    """Rate limits and concurrency caps for every ``(tenant, owner, tool)``: ``tenant`` calls
    the tool ``tool`` of ``owner`` (``""``: a platform tool)."""

    clock: Clock = time.monotonic
    sweep_at: int = SWEEP_AT
    _buckets: dict[_Key, _Bucket] = field(default_factory=dict)
    _running: dict[_Key, int] = field(default_factory=dict)
    _next_sweep: int = 0

    def admit(
        self,
        tenant: str,
        tool: str,
        *,
        owner: str,
        rate_per_s: float | None,
        burst: int | None,
        max_concurrency: int | None,
    ) -> None:
        """Take one rate token and one concurrency slot for ``tenant`` calling ``owner``'s
        ``tool``.

        ``burst`` is the bucket size (default ``max(1, ceil(rate_per_s))``); ``None`` limits
        mean unlimited. Raises :class:`RateLimited` (429, with ``Retry-After`` in whole
        seconds when the rate will allow the call) and takes nothing then. The caller must
        call :meth:`release` exactly once after an admitted call.
        """
        key = (tenant, owner, tool)
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

    def _take_token(self, key: _Key, tool: str, rate: float, burst: int | None) -> None:
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
        """Drop the rate buckets of ``owner``'s deleted ``tool`` at once, full or not: the
        owner's own (only its owner calls a tenant's tool), every tenant's for a platform
        tool (``owner`` ``""``). Concurrency slots stay until their calls release them.

        Registered again, the tool's buckets start full, as any new tool's. Keeping a bucket
        that is not full across the delete would bind nobody: a tenant's tool's rate and
        burst are its owner's own settings, which a replacement (``POST /v1/tools`` of the
        name, no delete needed) changes at once, refilling the bucket at the new rate; and a
        platform tool is deleted and registered by the operator, who sets its limit. What
        binds a tenant against its will is out of a delete's reach: a platform tool's bucket
        (keyed apart from the tenant's own tool of that name, so deleting a shadowing tool
        resets nothing), and its tenant-level limits and its program's ``tool_calls`` quota,
        held by the program service and checked on every call (``ensure_tool_node``)."""
        if owner:
            self._buckets.pop((owner, owner, tool), None)
            return
        for key in [k for k in self._buckets if k[1] == "" and k[2] == tool]:
            del self._buckets[key]

    def buckets(self) -> int:
        """Rate buckets held (memory the limits keep)."""
        return len(self._buckets)

    def release(self, tenant: str, tool: str, *, owner: str, ran: bool = True) -> None:
        """Give back the concurrency slot an admitted call of ``owner``'s ``tool`` held;
        ``ran=False`` (the call was answered from the store: nothing ran) gives back its rate
        token too, up to the bucket's size."""
        key = (tenant, owner, tool)
        bucket = self._buckets.get(key)
        if not ran and bucket is not None:
            bucket.tokens = min(bucket.size, bucket.tokens + 1.0)
        left = self._running.get(key, 0) - 1
        if left > 0:
            self._running[key] = left
        else:
            self._running.pop(key, None)

    def running(self, tenant: str, tool: str, *, owner: str) -> int:
        """Calls of ``owner``'s ``tool`` by ``tenant`` admitted and not yet released."""
        return self._running.get((tenant, owner, tool), 0)
