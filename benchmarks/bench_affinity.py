"""Affinity vs round robin over N simulated replicas: program throughput at saturation.

Goals (issue 13): with ``affinity`` routing (what ``serve --dp N`` does: a program's first call
by the KV-aware score, later calls on the same replica), N replicas finish >= 0.9 N x the
programs per second of one, and >= 1.3 x what per-call ``round-robin`` (SGLang's own
data-parallel default) finishes on the same N.

Every run is overloaded (arrivals at ``--overload`` x the replicas' throughput bound), so the
figure is capacity, not the arrival rate: programs finished per second between the 20th and the
80th percentile of finish times (``--warmup``: the ramp and the drain are left out; at 2x
overload a backlog keeps every replica busy in between). Every configuration runs in this one
invocation, side by side, on the same trace per N.
Run: ``.venv/bin/python benchmarks/bench_affinity.py``.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.events import EventKind
from agentconsole.server.runtime.sim.bound import throughput_bound
from agentconsole.server.runtime.sim.calls import EngineConfig
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.routing import ReplicaRouter
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

SCALING_GOAL = 0.9  # affinity on N replicas vs N x one replica
ROUND_ROBIN_GOAL = 1.3  # affinity vs round robin on the same N


@dataclass(frozen=True, slots=True)
class Run:
    replicas: int
    routing: str
    programs_per_s: float  # finished inside the steady window, per second
    finished: int
    hit_tokens: int
    computed_tokens: int  # prompt tokens prefilled (not found cached)
    cpu_s: float


def one(workload: str, policy: str, per_replica: int, overload: float, warmup: float,
        rank_aware: bool, replicas: int, routing: str, seed: int) -> Run:  # fmt: skip
    started = time.process_time()
    cost = preset("H200-141GB", "llama-3.1-8b", 1)
    sample = generate(workload, n_programs=200, rate=1.0, seed=seed)
    per_replica_bound = throughput_bound(sample, cost).programs_per_s
    rate = overload * per_replica_bound * replicas
    n = per_replica * replicas
    programs = generate(workload, n_programs=n, rate=rate, seed=seed)
    engine = EngineConfig(rank_aware_steps=rank_aware)
    sim = Simulation(programs, cost, SimConfig(policy=policy, replicas=replicas, engine=engine))
    sim.router = ReplicaRouter(sim.engines, cost, routing)
    result = sim.run()
    ends: list[float] = []
    hits = computed = 0
    for e in result.events.events:
        if e.kind is EventKind.PROGRAM_FINISHED:
            ends.append(e.t)
        elif e.kind is EventKind.CALL_FINISHED:
            cached = int(e.data.get("cached_tokens", 0) or 0)
            hits += cached
            computed += int(e.data.get("prompt_tokens", 0) or 0) - cached
    ends.sort()
    lo, hi = int(len(ends) * warmup), int(len(ends) * (1 - warmup)) - 1
    steady = (hi - lo) / (ends[hi] - ends[lo]) if hi > lo and ends[hi] > ends[lo] else 0.0
    return Run(
        replicas, routing, steady, len(ends), hits, computed,
        time.process_time() - started,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="seed-mix")
    parser.add_argument("--policy", default="cp-cache")
    parser.add_argument("--replicas", default="1,2,4,8", help="comma-separated N to compare")
    parser.add_argument("--programs-per-replica", type=int, default=60)
    parser.add_argument("--overload", type=float, default=2.0)
    parser.add_argument(
        "--warmup", type=float, default=0.2, help="share of finishes left out at each end"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--rank-aware-steps",
        action="store_true",
        help="the engine that composes steps by rank (bench's default before 2026-12-02)",
    )
    args = parser.parse_args()
    counts = sorted({int(x) for x in args.replicas.split(",")} | {1})
    configs = [(n, "affinity") for n in counts]
    configs += [(n, "round-robin") for n in counts if n > 1]
    fixed = (
        args.workload,
        args.policy,
        args.programs_per_replica,
        args.overload,
        args.warmup,
        args.rank_aware_steps,
    )
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {c: pool.submit(one, *fixed, c[0], c[1], args.seed) for c in configs}
        runs = {c: f.result() for c, f in futures.items()}
    single = runs[(1, "affinity")].programs_per_s
    table = Table(
        title=f"{args.workload}, {args.policy}, simulated H200 x Llama-3.1-8B, "
        f"{args.programs_per_replica} programs per replica at {args.overload}x the bound"
    )
    for column in (
        "N", "aff prog/s", "rr prog/s",
        f"aff/(N x 1) >= {SCALING_GOAL}",
        f"aff/rr >= {ROUND_ROBIN_GOAL}",
        "prefilled tok/prog aff / rr", "CPU s aff / rr",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    for n in counts:
        aff = runs[(n, "affinity")]
        rr = runs.get((n, "round-robin"))
        table.add_row(
            str(n),
            f"{aff.programs_per_s:.4f}",
            f"{rr.programs_per_s:.4f}" if rr else "-",
            f"{aff.programs_per_s / (n * single):.2f}",
            f"{aff.programs_per_s / rr.programs_per_s:.2f}" if rr and rr.programs_per_s else "-",
            f"{aff.computed_tokens / max(aff.finished, 1):,.0f} / "
            + (f"{rr.computed_tokens / max(rr.finished, 1):,.0f}" if rr else "-"),
            f"{aff.cpu_s:.0f} / " + (f"{rr.cpu_s:.0f}" if rr else "-"),
        )
    Console().print(table)


if __name__ == "__main__":
    main()
