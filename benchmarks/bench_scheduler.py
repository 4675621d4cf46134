"""Scheduling decision latency with 10,000 (or ``--programs``) live programs, per policy.

A decision is what the engine does to pick its next call: ``peek`` the fairness-guarded ready
queue, ``pop`` the winner, and ``push`` the program's next call with a fresh ticket from the
controller (so the queue stays at 10,000 waiting calls, one per program, over 4 tenants).
Goal: p99 at most 100 µs (issue 13: at 100,000 programs, ``--programs 100000``). Each decision
is timed twice: wall clock, and the thread's CPU time (``thread_time_ns``), which on a shared
machine leaves out the time other processes held the core.

The garbage collector is set up as ``serve`` sets it up after start-up (``server/app.py``'s
lifespan): the set-up's objects frozen out of its reach (``gc.freeze()``) and young
collections every ``GC_THRESHOLDS[0]`` = 50,000 allocations. ``--gc cpython`` keeps CPython's
default of every 700 instead (what a process that never tuned it gets). Run:
``.venv/bin/python benchmarks/bench_scheduler.py``.
"""

from __future__ import annotations

import argparse
import gc
import random
import time

from rich.console import Console
from rich.table import Table

from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.fairness import FairnessGuard
from agentconsole.scheduler.policies import available, get_policy
from agentconsole.scheduler.program import Node, NodeKind
from agentconsole.scheduler.queue import ReadyQueue


class _Flat:
    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return uncached_prompt_tokens * 2e-5 + output_tokens * 0.01


def bench(
    policy: str,
    programs: int,
    decisions: int,
    seed: int,
    gc_thresholds: tuple[int, int, int] | None = None,
) -> tuple[list[float], list[float]]:
    """Sorted wall-clock and CPU-time latencies (µs) of ``decisions`` decisions, under
    ``gc_thresholds`` (None: the process's current ones)."""
    rng = random.Random(seed)
    controller = ProgramController(EventLog(keep=False), _Flat())
    guard = FairnessGuard()
    queue = ReadyQueue(get_policy(policy), guard)
    now = 0.0
    step: dict[str, int] = {}
    for i in range(programs):
        pid = f"p{i}"
        controller.open_program(pid, f"t{i % 4}", now)
        controller.add_node(pid, Node("n0", pid, NodeKind.LLM), now)
        queue.push(controller.ticket(pid, "n0", now, prompt_tokens=rng.randint(1_000, 90_000)), now)
        step[pid] = 0
    # what serve does after start-up: move the long-lived objects out of the collector's
    # reach, so generational GC does not walk 100,000 programs mid-decision, and collect the
    # young generation every GC_THRESHOLDS[0] allocations
    gc.collect()
    gc.freeze()
    before = gc.get_threshold()
    if gc_thresholds is not None:
        gc.set_threshold(*gc_thresholds)
    samples, cpu = [], []
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    for _ in range(decisions):
        now += 0.001
        c0 = cpu_clock()
        t0 = clock()
        ticket = queue.pop(now)
        assert ticket is not None
        pid = ticket.program_id
        k = step[pid] = step[pid] + 1
        controller.start_node(pid, ticket.node_id, now)
        guard.record_service(ticket.tenant, 0.05, now)
        node = controller.add_node(pid, Node(f"n{k}", pid, NodeKind.LLM), now)
        queue.push(controller.ticket(pid, node.node_id, now, prompt_tokens=90_000), now)
        t1 = clock()
        cpu.append((cpu_clock() - c0) / 1000)
        samples.append((t1 - t0) / 1000)
        # the finished call's bookkeeping is outside the decision
        controller.get(pid).nodes[ticket.node_id].state = node.state.DONE
    gc.set_threshold(*before)
    gc.unfreeze()  # this policy's programs may go: the next one builds its own
    return sorted(samples), sorted(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default=",".join(available()))
    parser.add_argument(
        "--gc",
        choices=("serve", "cpython"),
        default="serve",
        help="young-collection threshold: serve's (server/app.py GC_THRESHOLDS) or CPython's",
    )
    args = parser.parse_args()
    if args.gc == "serve":
        # the constant itself, not a copy (serve's module: slow to import, read once)
        from agentconsole.server.app import GC_THRESHOLDS

        thresholds: tuple[int, int, int] = GC_THRESHOLDS
    else:
        thresholds = (700, 10, 10)
    table = Table(
        title=f"scheduling decision with {args.programs:,} live programs (µs), "
        f"gc thresholds {thresholds}"
    )
    for col in ("policy", "p50", "p99", "max", "CPU p50", "CPU p99", "goal p99 <= 100"):
        table.add_column(col, justify="right")
    for policy in args.policies.split(","):
        s, c = bench(policy, args.programs, args.decisions, args.seed, thresholds)
        p50, p99 = s[len(s) // 2], s[int(len(s) * 0.99)]
        c50, c99 = c[len(c) // 2], c[int(len(c) * 0.99)]
        verdict = "met" if p99 <= 100 else ("met (CPU)" if c99 <= 100 else "MISSED")
        table.add_row(
            policy,
            f"{p50:.1f}",
            f"{p99:.1f}",
            f"{s[-1]:.0f}",
            f"{c50:.1f}",
            f"{c99:.1f}",
            verdict,
        )
    Console().print(table)


if __name__ == "__main__":
    main()
