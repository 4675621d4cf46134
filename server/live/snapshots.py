"""Metric history: every ``interval_s`` the live metrics are sampled into the store's
``metric_snapshots`` table (one row per metric, append-only), so a console or an export can
chart a day of serving after the in-memory windows have moved on.

What is sampled: the program-level numbers of :class:`MetricsAggregator` (throughput,
goodput, E2E and TTFT percentiles, critical-path idle, hit and recompute tokens, the worst
tenant slowdown and starvation), per-tenant starvation (label ``tenant``), and the runtime's
queue, batch and KV use per tier (label ``tier``). NaN values (no data yet) are skipped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.runtime import RuntimeSnapshot
from agentconsole.server.live.periodic import Periodic
from agentconsole.server.store.journal import MetricSample

#: the report keys sampled (names stored as they are)
SAMPLED = (
    "throughput_programs_per_s",
    "goodput_programs_per_s",
    "e2e_p50_s",
    "e2e_p95_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "cp_idle_queue_mean_s",
    "cp_idle_kv_mean_s",
    "cp_idle_tool_mean_s",
    "prefix_hit_tokens",
    "recompute_tokens",
    "ghost_tokens",
    "max_tenant_slowdown",
    "max_tenant_starvation",
)


def samples(
    now: float, metrics: MetricsAggregator, snapshot: RuntimeSnapshot
) -> Iterator[MetricSample]:
    """The rows of one sampling at ``now``: starvation as of ``now``, so waits still running
    (in an engine's queue, at the door) count while they run, not only once they end."""
    report = metrics.report(now)
    for name in SAMPLED:
        value = report.get(name)
        if isinstance(value, int | float) and math.isfinite(value):
            yield MetricSample(now, name, float(value))
    for tenant, tm in metrics.tenants(now).items():
        if math.isfinite(tm.starvation):
            yield MetricSample(now, "tenant_starvation", tm.starvation, {"tenant": tenant})
    yield MetricSample(now, "queued_calls", float(len(snapshot.queued)))
    yield MetricSample(now, "running_calls", float(len(snapshot.running)))
    for tier, usage in snapshot.tiers.items():
        yield MetricSample(now, "kv_used_tokens", float(usage.used_tokens), {"tier": tier})


class MetricRecorder:
    """Samples the live metrics into the store every ``interval_s`` (one asyncio task)."""

    def __init__(
        self,
        metrics: MetricsAggregator,
        snapshot: Callable[[], RuntimeSnapshot],
        put: Callable[[MetricSample], object],
        *,
        interval_s: float = 10.0,
    ) -> None:
        self.metrics = metrics
        self.snapshot = snapshot
        self.put = put
        self._periodic = Periodic("metric-snapshots", interval_s, self._tick)

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def _tick(self) -> None:
        self.sample(time.time())

    def sample(self, now: float) -> int:
        """Write one sampling; returns the rows written."""
        rows = 0
        for row in samples(now, self.metrics, self.snapshot()):
            self.put(row)
            rows += 1
        return rows
