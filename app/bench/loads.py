"""``bench --loads``: every policy at fixed multiples of the engine's measured capacity.

The capacity is measured, not assumed: every listed policy runs the workload's programs
arriving at ``SATURATION_X`` times the throughput bound (``sim/bound.py``: no schedule
finishes more, so arrivals that fast saturate any of them), and the highest finished-programs
rate any of them sustains there is the engine's peak (a schedule that thrashes finishes
fewer). The default policy is measured there too when it is not listed: the peak is the
engine's, whichever policies a run compares (measured by thrashing ``fcfs`` alone, a "2x" row
ran below what the engine sustains, at a share of the peak above 100%).
Each load is then that many times the peak as an arrival rate, and each policy's report says
what share of the peak it finished, its P50/P95 E2E and the tokens it recomputed. A generated
workload's arrivals are a Poisson draw at that rate, so a draw offers a little more or less
than its label (``offered_share``: its realized arrival rate over the peak); a trace is
rescaled to the rate exactly.

With ``seeds`` > 1 every cell runs that many draws of the workload (seeds ``setup.seed`` on,
at the same rates: the peak is measured on the first) and a row is their mean, each draw kept
in ``draws``: at 0.9x of the peak one draw's P95 moves by a few percent with the seed alone
(docs/BENCHMARKS.md 2f), more than a 1% goal, so a comparison is read from paired draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from agentconsole.bench.runner import BenchSetup, cost_model, load_programs, run_one
from agentconsole.scheduler.policies import DEFAULT_POLICY
from agentconsole.server.runtime.sim.bound import oracle_hits, throughput_bound

#: arrivals this many times the throughput bound saturate the engines
SATURATION_X = 3.0
#: what a load row keeps of a run's report
KEPT = (
    "rate_programs_per_s",
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
    seeds: int = 1,
) -> dict[str, Any]:
    """Measure the peak, then run every ``(label, policy, kv policy)`` at every load, ``seeds``
    draws each; returns ``{"peak_programs_per_s", "oracle", "seeds", "loads": {load: {label:
    row}}}``, a row the mean of its draws (each in ``draws`` when there are several)."""
    saturated = saturation_rate(setup)
    measured = list(runs)
    if all(policy != DEFAULT_POLICY for _, policy, _ in runs):
        measured.append((f"{DEFAULT_POLICY} (peak only)", DEFAULT_POLICY, runs[0][2]))
    peak_runs = gather(
        "peak",
        {label: pool.submit(run_one, setup, p, k, saturated) for label, p, k in measured},
    )
    peak = max(r["throughput_programs_per_s"] for r in peak_runs.values())
    out: dict[str, Any] = {
        "peak_programs_per_s": peak,
        "peak_by_policy": {k: r["throughput_programs_per_s"] for k, r in peak_runs.items()},
        "seeds": list(range(setup.seed, setup.seed + seeds)),
        "loads": {},
    }
    draws = [replace(setup, seed=seed) for seed in out["seeds"]]
    # each draw is its own workload, with its own ceiling of hits
    oracles = [oracle_hits(load_programs(draw)) for draw in draws]
    out["oracle"] = {"hit_tokens": oracles[0].hit_tokens, "prompt_tokens": oracles[0].prompt_tokens}
    if len(draws) > 1:
        out["oracle_by_seed"] = [o.hit_tokens for o in oracles]
    for load in loads:
        futures = {
            f"{label}@{i}": pool.submit(run_one, draw, p, k, load * peak)
            for label, p, k in runs
            for i, draw in enumerate(draws)
        }
        reports = gather(f"{load:g}x", futures)
        out["loads"][f"{load:g}"] = {
            label: _row(
                [reports[f"{label}@{i}"] for i in range(len(draws))],
                [o.hit_tokens for o in oracles],
                peak,
            )
            for label, _, _ in runs
        }
    return out


def _tenant_slowdowns(reports: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each tenant's mean slowdown over the draws where it finished programs (what
    ``--tenant-weight`` moves: a heavier tenant's falls, the others' rise)."""
    seen: dict[str, list[float]] = {}
    for report in reports:
        for tenant, figures in report.get("tenants", {}).items():
            slowdown = figures.get("slowdown")
            # NaN: the tenant finished nothing in that draw (a NaN would blank its mean)
            if isinstance(slowdown, int | float) and math.isfinite(slowdown):
                seen.setdefault(tenant, []).append(slowdown)
    return {tenant: sum(values) / len(values) for tenant, values in sorted(seen.items())}


def _row(reports: Sequence[dict[str, Any]], oracles: Sequence[int], peak: float) -> dict[str, Any]:
    """One cell: the mean of its draws' kept figures (and each draw, when several), with
    ``oracle_share``, the mean of each draw's hits over that draw's own oracle."""
    kept = [{key: report[key] for key in KEPT} for report in reports]
    row: dict[str, Any] = {}
    for key in KEPT:
        mean = sum(draw[key] for draw in kept) / len(kept)
        row[key] = round(mean) if isinstance(kept[0][key], int) else mean  # counts stay whole
    row["share_of_peak"] = row["throughput_programs_per_s"] / peak if peak else 0.0
    # the load a draw offers: a generated workload's arrivals are a Poisson draw at the
    # label's rate, so its realized rate differs by chance (200 programs: often by 5-15%)
    row["offered_share"] = row["rate_programs_per_s"] / peak if peak else 0.0
    shares = [d["prefix_hit_tokens"] / o for d, o in zip(kept, oracles, strict=True) if o]
    row["oracle_share"] = sum(shares) / len(shares) if shares else math.nan
    slowdowns = _tenant_slowdowns(reports)
    if len(slowdowns) > 1:
        row["tenant_slowdown"] = slowdowns
    if len(kept) > 1:
        row["draws"] = kept
    return row
