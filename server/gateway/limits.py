"""Per-tenant, per-tool limits (tool concurrency): a token-bucket rate limit and a concurrency
cap.

State is in memory (one process serves the API), keyed by ``(tenant, tool)``, and measured
on the monotonic clock so a wall-clock step never opens or closes the gate. A refused call
consumes nothing. Both limits are checked before the arguments are validated (research §3.4
pipeline order), so floods of malformed calls are throttled too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentconsole.server.gateway.errors import RateLimited

Clock = Callable[[], float]


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


@dataclass(slots=True)
class ToolLimits:
    """Rate limits and concurrency caps for every ``(tenant, tool)`` pair."""

    clock: Clock = time.monotonic
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    _running: dict[tuple[str, str], int] = field(default_factory=dict)

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
            bucket = self._buckets[key] = _Bucket(size, now)
        bucket.tokens = min(size, bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / rate
            raise RateLimited(
                f"rate limit of {rate:g} calls/s for tool {tool!r} exceeded",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
                extra={"limit": "rate"},
            )
        bucket.tokens -= 1.0

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
