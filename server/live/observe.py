"""What the consoles read: overview, tenants, KV and runtime views.

Every number comes from one of three places, never computed twice: the
:class:`MetricsAggregator` and the mid-prompt insertion books (fed by the hub, so counts cover
events since this server started), the runtime's :class:`RuntimeSnapshot` (queue, batch,
tiers) and the controller's live programs (running counts, quota use). The aggregator's
report sorts its samples, so it is cached for ``report_ttl_s``.

Tenant keys see only their own rows of ``tenants``, ``kv`` and ``runtime``; ``overview`` is a
platform-wide aggregate.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from typing import Any

from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.program import ProgramState
from agentconsole.scheduler.runtime import CacheAction, RuntimeSnapshot
from agentconsole.server.live.service import ProgramService
from agentconsole.server.live.views import finite

JSON = dict[str, Any]


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return finite(value)
    return value


class Observer:
    """Builds the observation JSON of API.md from the live service and the aggregator."""

    def __init__(
        self, service: ProgramService, metrics: MetricsAggregator, report_ttl_s: float = 1.0
    ) -> None:
        self.service = service
        self.metrics = metrics
        self.report_ttl_s = report_ttl_s
        self._report: tuple[float, dict[str, Any]] = (-math.inf, {})

    def report(self) -> dict[str, Any]:
        """The aggregator's report, at most ``report_ttl_s`` old."""
        at, cached = self._report
        now = time.monotonic()
        if now - at >= self.report_ttl_s:
            cached = self.metrics.report(time.time())  # live: waits so far count
            self._report = (now, cached)
        return cached

    def snapshot(self) -> RuntimeSnapshot:
        return self.service.runtime.snapshot()

    @staticmethod
    def tiers(snapshot: RuntimeSnapshot) -> JSON:
        return {name: asdict(usage) for name, usage in snapshot.tiers.items()}

    def overview(self) -> JSON:
        """``GET /v1/overview``."""
        report, snap, service = self.report(), self.snapshot(), self.service
        counts = self.metrics.counts  # exact counts now; percentiles from the cached report
        ended = {s: int(counts.get(s, 0)) for s in ("finished", "failed", "cancelled")}
        running = sum(
            1 for p in service.controller.programs.values() if p.state is ProgramState.RUNNING
        )
        return {
            "policy": service.policy.name,
            "kv_policy": service.kv_policy,
            "runtime": snap.runtime,
            "draining": service.draining,
            "programs": {"running": running, **ended},
            # over the aggregator's rate window (serve: the last minute)
            "throughput_programs_per_s": _clean(report.get("throughput_programs_per_s", 0.0)),
            "goodput_programs_per_s": _clean(report.get("goodput_programs_per_s", 0.0)),
            "e2e_p50_s": _clean(report.get("e2e_p50_s")),
            "e2e_p95_s": _clean(report.get("e2e_p95_s")),
            "e2e_p99_s": _clean(report.get("e2e_p99_s")),
            "queue_depth": len(snap.queued),
            "running_calls": len(snap.running),
            "kv": self.tiers(snap),
            # the aggregator's sum of ``call.scheduled`` hits, the figure of /metrics, bench and
            # the stored snapshots (a runtime's own counter also counts admissions that failed)
            "prefix_hit_tokens": int(counts.get("prefix_hit_tokens", 0)),
            "ghost_tokens": int(counts.get("ghost_tokens", 0)),
            # several models served: prompt tokens one prefilled that another had cached
            "cross_model_lost_tokens": int(counts.get("cross_model_lost_tokens", 0)),
            # mid-prompt insertions and the prefix reuse they lost (insertions.py)
            "prompt_insertions": service.insertions.total.json(),
            # how far the online estimates the policies rank by were off (count, mean
            # absolute and relative error, bias) per kind: output tokens, tool latency, ...
            "estimator_errors": {
                kind: {k: _clean(v) for k, v in stats.items()}
                for kind, stats in service.controller.prediction_log.summary().items()
            },
        }

    def tenants(self, tenant: str | None) -> JSON:
        """``GET /v1/tenants`` (``tenant`` set: that tenant's row only). ``quota_use`` is the
        largest used/limit ratio among the tenant's running programs with that quota."""
        running: dict[str, int] = {}
        use: dict[str, dict[str, float]] = {}
        for program in self.service.controller.programs.values():
            t = program.tenant
            row = use.setdefault(t, {"tokens": 0.0, "tool_calls": 0.0})
            if program.state is not ProgramState.RUNNING:
                continue
            running[t] = running.get(t, 0) + 1
            q = program.quotas
            if q.tokens:
                row["tokens"] = max(row["tokens"], program.tokens_used / q.tokens)
            if q.tool_calls:
                row["tool_calls"] = max(row["tool_calls"], program.tool_calls / q.tool_calls)
        rows = []
        now = time.time()
        budgets = self.service.tenants
        for name, m in self.metrics.tenants(now).items():
            if tenant is not None and name != tenant:
                continue
            rows.append(
                {
                    "tenant": name,
                    "programs": m.programs,
                    "running": running.get(name, 0),
                    "slowdown": finite(m.slowdown),
                    "starvation": finite(m.starvation),
                    "max_queue_wait_s": m.max_queue_wait_s,
                    # since the server started, as ``programs``: a sum over the programs in
                    # memory fell as ended ones left it (and below the last minute's)
                    "tokens_used": m.tokens,
                    "quota_use": use.get(name, {"tokens": 0.0, "tool_calls": 0.0}),
                    "prompt_insertions": self.service.insertions.tenant(name),
                    # tenant-level limits (None: unlimited) and what counts against them
                    "limits": asdict(budgets.limits(name)),
                    **budgets.usage(name, now),
                }
            )
        return {"tenants": rows}

    def kv(self, tenant: str | None) -> JSON:
        """``GET /v1/kv``; a tenant sees its own retained contexts and placement only."""
        snap, report, now = self.snapshot(), self.report(), time.time()
        retained = [
            {
                "program_id": r.program_id,
                "tenant": r.tenant,
                "tokens": r.tokens,
                "tier": "hbm" if r.action is CacheAction.KEEP else "dram",
                "until": r.until,
            }
            for r in self.service.driver.retained.values()
            if r.until > now and (tenant is None or r.tenant == tenant)
        ]
        placement = {
            pid: tiers
            for pid, tiers in snap.placement.items()
            if tenant is None or self.service.tenant_of(pid) == tenant
        }
        return {
            "tiers": self.tiers(snap),
            "retained": retained,
            "migrations": int(report.get("migrations", 0)),
            "recomputes": int(report.get("recomputes", 0)),
            "placement": placement,
        }

    def runtime(self, tenant: str | None) -> JSON:
        """``GET /v1/runtime``; a tenant sees its own queued and running calls only."""
        snap = self.snapshot()
        return {
            "runtime": snap.runtime,
            "policy": snap.policy,
            "queued": [asdict(q) for q in snap.queued if tenant is None or q.tenant == tenant],
            "running": [asdict(r) for r in snap.running if tenant is None or r.tenant == tenant],
            "tiers": self.tiers(snap),
            "paused": snap.paused,
        }
