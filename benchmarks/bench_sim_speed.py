"""Simulator speed: one simulated hour of seed-mix (3,000 programs) per policy.

3,000 programs in an hour is 0.83 programs/s, about what 16 simulated H200s serving
Llama-3.1-8B sustain on seed-mix (one serves ~0.08/s: its decode is bound by reading each
call's ~80K-token KV), so the run uses 16 replicas behind the KV-aware router.
Goal (issue 12): at most 3 s of wall time per policy, metrics included, on a 2-core machine.
The CPU-time column is the same run's process time: on a shared machine, where wall time
also counts other people's work, it is the figure to compare. "released s" is the time to
free the run's objects once its report is made (after the timed figures, as in `bench`).
Run: ``.venv/bin/python benchmarks/bench_sim_speed.py`` (the interpreted package), or the
compiled build: ``scripts/compile.sh && PYTHONPATH=build/compiled .venv/bin/python
benchmarks/bench_sim_speed.py``; the table's title says which ran.
"""

from __future__ import annotations

import argparse
import gc
import time

from rich.console import Console
from rich.table import Table

from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.events import paused_gc
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.policies import available
from agentconsole.server.runtime.sim import compiled
from agentconsole.server.runtime.sim.calls import EngineConfig
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

GOAL_S = 3.0


def build() -> str:
    """Which build runs: the compiled one or the interpreted package."""
    return "compiled with mypyc" if compiled() else "interpreted; scripts/compile.sh for mypyc"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=3000)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--policies", default=",".join(available()))
    parser.add_argument(
        "--rank-aware-steps",
        action="store_true",
        help="the engine that composes steps by rank (bench's default before 2026-12-02)",
    )
    parser.add_argument(
        "--mixed-chunk",
        action="store_true",
        help="decode rides along with prefill steps (bench's default before 2026-12-03)",
    )
    parser.add_argument(
        "--defer-prefill-steps",
        type=int,
        default=EngineConfig().defer_prefill_steps,
        help="decode-only steps a pending prefill may wait (0: as before 2026-12-03)",
    )
    args = parser.parse_args()
    engine = EngineConfig(
        rank_aware_steps=args.rank_aware_steps,
        mixed_chunk=args.mixed_chunk,
        defer_prefill_steps=args.defer_prefill_steps,
    )
    rate = args.programs / (args.hours * 3600)
    started = time.perf_counter()
    programs = generate("seed-mix", n_programs=args.programs, rate=rate, seed=0)
    generated = time.perf_counter() - started
    table = Table(
        title=f"{args.programs:,} seed-mix programs over {args.hours:g} simulated h "
        f"on {args.replicas} x H200 / Llama-3.1-8B (trace generated in "
        f"{generated:.2f} s; {build()})"
    )
    for col in (
        "policy",
        "wall s (sim)",
        "wall s (+metrics)",
        "cpu s (+metrics)",
        "released s",
        "events",
        "simulated s",
        "finished",
        "E2E P95 s",
        f"goal <= {GOAL_S:g} s",
    ):
        table.add_column(col, justify="right")
    for policy in args.policies.split(","):
        # each policy from the same state, as if alone in its process (`bench` spreads
        # policies over worker processes): the previous run's millions of objects are freed
        # (end of the loop) and collected first, not while this one runs (measured: otherwise
        # the later policies run 10-20% slower)
        gc.collect()
        config = SimConfig(policy=policy, replicas=args.replicas, engine=engine)
        sim = Simulation(programs, preset(), config)
        # as `bench` runs a policy (app/bench/runner.py): the collector paused over the run
        # and its metrics both, and the run dropped before the pause ends
        with paused_gc():
            cpu = time.process_time()
            result = sim.run()
            t0 = time.perf_counter()
            report = MetricsAggregator().observe_all(result.events.events).report()
            total = result.wall_s + time.perf_counter() - t0
            cpu = time.process_time() - cpu
            wall_sim, events, simulated = result.wall_s, len(result.events), result.sim_s
            t0 = time.perf_counter()
            del sim, result
            released = time.perf_counter() - t0
        table.add_row(
            policy,
            f"{wall_sim:.2f}",
            f"{total:.2f}",
            f"{cpu:.2f}",
            f"{released:.2f}",
            f"{events:,}",
            f"{simulated:,.0f}",
            str(report["finished"]),
            f"{report['e2e_p95_s']:.0f}",
            "met" if total <= GOAL_S else "MISSED",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
