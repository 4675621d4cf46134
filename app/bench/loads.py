"""``bench --loads``: every policy at fixed multiples of the engine's measured capacity.

The capacity is measured, not assumed: every listed policy runs the workload's programs
arriving at ``SATURATION_X`` times the throughput bound (``sim/bound.py``: no schedule
finishes more, so arrivals that fast saturate any of them), and the highest finished-programs
rate any of them sustains there is the engine's peak (a schedule that thrashes finishes
fewer).
Each load is then that many times the peak as an arrival rate, and each policy's report says
what share of the peak it finished, its P50/P95 E2E and the tokens it recomputed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from agentconsole.bench.runner import BenchSetup, cost_model, load_programs, run_one
from agentconsole.server.runtime.sim.bound import oracle_hits, throughput_bound

#: arrivals this many times the throughput bound saturate the engines
SATURATION_X = 3.0
#: what a load row keeps of a run's report
KEPT = (
    "finished",
    "throughput_programs_per_s",
    "e2e_p50_s",
    "e2e_p95_s",
    "recompute_tokens",
    "prefix_hit_tokens",
)


def saturation_rate(setup: BenchSetup) -> float:
    """An arrival rate far above what any schedule sustains for the setup's workload."""
    bound = throughput_bound(load_programs(setup), cost_model(setup), replicas=setup.replicas)
    return bound.programs_per_s * SATURATION_X


def run_loads(
    pool: ProcessPoolExecutor,
    setup: BenchSetup,
    runs: Sequence[tuple[str, str, str]],
    loads: Sequence[float],
    gather: Callable[[str, dict[str, Future[dict[str, Any]]]], dict[str, dict[str, Any]]],
) -> dict[str, Any]:
    """Measure the peak, then run every ``(label, policy, kv policy)`` at every load; returns
    ``{"peak_programs_per_s", "oracle", "loads": {load: {label: row}}}``."""
    saturated = saturation_rate(setup)
    peak_runs = gather(
        "peak",
        {label: pool.submit(run_one, setup, p, k, saturated) for label, p, k in runs},
    )
    peak = max(r["throughput_programs_per_s"] for r in peak_runs.values())
    out: dict[str, Any] = {
        "peak_programs_per_s": peak,
        "peak_by_policy": {k: r["throughput_programs_per_s"] for k, r in peak_runs.items()},
        "loads": {},
    }
    oracle = oracle_hits(load_programs(setup))
    out["oracle"] = {"hit_tokens": oracle.hit_tokens, "prompt_tokens": oracle.prompt_tokens}
    for load in loads:
        futures = {label: pool.submit(run_one, setup, p, k, load * peak) for label, p, k in runs}
        reports = gather(f"{load:g}x", futures)
        out["loads"][f"{load:g}"] = {
            label: {
                **{key: report[key] for key in KEPT},
                "share_of_peak": report["throughput_programs_per_s"] / peak if peak else 0.0,
            }
            for label, report in reports.items()
        }
    return out
