"""``bench --sweep``: each policy's highest arrival rate whose P95 E2E meets the SLO.

Rates are searched geometrically (double or halve from a start until the SLO flips), then
bisected in log space. Every probe is a full simulation of the same programs at another rate
(the generators draw arrivals from their own random stream, so only the times change).
"""

from __future__ import annotations

import math
from typing import Any

from agentconsole.bench.runner import BenchSetup, run_one

#: a probe must finish this share of its programs to count (an overloaded run cannot)
MIN_FINISHED = 0.9


def meets(report: dict[str, Any], slo_p95_s: float) -> bool:
    """The probe's P95 E2E is within ``slo_p95_s`` and it finished (successfully) at least
    ``MIN_FINISHED`` of the programs it ran: the report's own count, since a trace may hold
    fewer than ``--programs`` (``load_programs`` cuts it, never pads it), and a cancelled or
    failed program is no success a rate can be sustained with."""
    return (
        not math.isnan(report["e2e_p95_s"])
        and report["e2e_p95_s"] <= slo_p95_s
        and report["finished"] >= MIN_FINISHED * report["programs"]
    )


def max_rate(
    setup: BenchSetup,
    policy: str,
    kv_policy: str,
    slo_p95_s: float,
    start: float,
    *,
    bisections: int = 6,
    max_steps: int = 10,
) -> dict[str, Any]:
    """Search the highest rate meeting ``slo_p95_s``; returns it with the report there.
    ``found`` is False when no rate tried missed the SLO (a trace of a few programs: at any
    rate they arrive as one burst the engine finishes in time): ``max_rate`` is then only the
    highest rate tried, a floor, not the engine's."""
    probes: list[tuple[float, bool]] = []

    def probe(rate: float) -> tuple[bool, dict[str, Any]]:
        report = run_one(setup, policy, kv_policy, rate=rate)
        ok = meets(report, slo_p95_s)
        probes.append((rate, ok))
        return ok, report

    ok, report = probe(start)
    best: dict[str, Any] | None = report if ok else None
    lo, hi = (start, math.inf) if ok else (0.0, start)
    for _ in range(max_steps):
        if ok and hi == math.inf:
            rate = lo * 2
        elif not ok and lo == 0.0:
            rate = hi / 2
        else:
            break
        ok, report = probe(rate)
        if ok:
            lo, best = rate, report
        else:
            hi = rate
    if lo > 0 and hi < math.inf:
        for _ in range(bisections):
            rate = math.sqrt(lo * hi)
            ok, report = probe(rate)
            if ok:
                lo, best = rate, report
            else:
                hi = rate
    return {
        "max_rate": lo,
        "found": hi < math.inf,
        "e2e_p95_s": best["e2e_p95_s"] if best else math.nan,
        "max_tenant_slowdown": best["max_tenant_slowdown"] if best else math.nan,
        "goodput_programs_per_s": best["goodput_programs_per_s"] if best else math.nan,
        "gpu_s_per_success": best["gpu_s_per_success"] if best else math.nan,
        "e2e_p50_s": best["e2e_p50_s"] if best else math.nan,
        "probes": probes,
    }
