"""Program-aware serving against stock SGLang, on the real CPU engine (tiny model).

Run: ``.venv/bin/python benchmarks/bench_sglang_cpu.py [--programs 60] [--rate 8] [--repeat 3]``.

The same workload (seed-mix of seed section 19, scaled to the tiny model: ~1/50 of the tokens,
so the 80K prefix becomes ~1.6K and contexts stay under the model's 2K positions; tool
latencies 10x shorter) is replayed in wall-clock time through three engines, one after the
other, each started fresh with the same KV pool and batch limit:

* ``agentconsole``: serve's own program glue (``replay_as_served``: the program driver, the
  default tool-wait policy, the door with ``--door``) and our plugin in SGLang's scheduler
  (``cp-cache`` policy under the fairness guard, preemption, tool-wait retention; the guard's
  aging floor and the preemption residency scaled by the same 10x as the tools, since they
  are time constants);
* ``sglang-fcfs`` and ``sglang-lpm``: stock SGLang's own policies played by ``LiveReplay``'s
  agents, our plugin disabled (``SGLANG_PLUGINS=none``), default LRU radix eviction.

``--dp N`` runs every engine with N data-parallel ranks (``--max-total-tokens`` per rank) and
adds ``agentconsole-rr``: ours with each call left to SGLang's round robin instead of pinned
to its program's rank, so routing alone differs from ``agentconsole`` (issue 13's affinity
against round robin on the real engine; the stock arms are round robin too).

For the arms with our plugin the table also prints the engine's forward-pass seconds per
finished program (every rank's, measured by the plugin): the capacity measure. ``done/s`` is
programs over the run's span, which the longest program sets whenever the engine is not the
bottleneck; a saturated engine finishes (ranks) / (engine seconds per program).

``--bound`` adds stock ``lpm`` with a pool every program's whole context fits in: no eviction,
no recompute, the same compute and batch limit. Its finished/s is what caching on the small pool
can approach at best (the program door's 1.5x-stock goal), and its P95 what perfect caching
gives ``lpm``'s order, measured beside the arms rather than argued.

``--max-running`` (default 2) and ``--max-total-tokens`` (default 12288) make a small engine
saturate as a big one does at scale: requests queue and KV is evicted, which is where
scheduling matters. The table reports program E2E (P50, P95, mean), the ratio of our P95 to
each baseline's, and prefix-cache hit rates. Timing on a shared machine is noisy: compare
within one run (``--repeat`` runs the engines again, interleaved, each repetition starting
from the next arm; an unmeasured ``--warm-up`` run of a few programs first takes the process's
cold start).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from agentconsole.replay.served import replay_as_served
from agentconsole.sample_traces.format import TraceProgram
from agentconsole.scheduler.growth import RunTimes
from agentconsole.scheduler.metrics import outcome_summary
from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime, default_model_dir
from agentconsole.server.runtime.sglang.control import ControlState
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.replay import LiveReplay, ProgramOutcome
from agentconsole.server.runtime.sglang.textbook import TextBook
from agentconsole.server.runtime.sglang.workload_scale import TINY_WORKLOADS
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.simulation import CostServiceModel


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    plugin: bool
    schedule_policy: str
    door: bool = False
    #: the door's line by response ratio of each kind's expected run (serve's default);
    #: False: first come first served
    shortest_first: bool = True
    #: with ``--dp`` > 1: programs pinned to a rank (ours), else SGLang's round robin per call
    pin_ranks: bool = True
    #: the KV pool in tokens (None: ``--max-total-tokens``)
    max_total_tokens: int | None = None
    #: ours: the plugin defers a prefill while a better-ranked request decodes
    #: (``PrefillDeferral``); False turns it off
    defer_prefill: bool = True


#: the stock arms are unpinned: with ``--dp`` > 1 SGLang's own round robin places their calls
#: (until 2026-12-02 they were pinned by our router too, so their rows were stock scheduling
#: behind our placement, not stock SGLang)
ARMS = (
    Arm("agentconsole", True, "fcfs"),
    Arm("sglang-fcfs", False, "fcfs", pin_ranks=False),
    Arm("sglang-lpm", False, "lpm", pin_ranks=False),
)
#: how long a program of the door arm may wait at the door (serve's bound is
#: ``limits.admission_wait_s``, then 503 with Retry-After for the client to come back)
DOOR_WAIT_S = 24 * 3600.0
DOOR_ARM = Arm("agentconsole+door", True, "fcfs", door=True)
#: ``--door``: the door with its line in arrival order (before 2026-12-04), measured beside it
DOOR_ARRIVAL_ARM = Arm("agentconsole+door-arrival", True, "fcfs", door=True, shortest_first=False)
#: ``--dp`` > 1: ours with calls unpinned, so the routing alone differs from ``agentconsole``
ROUND_ROBIN_ARM = Arm("agentconsole-rr", True, "fcfs", pin_ranks=False)
#: ``--bound``: stock ``lpm`` with a pool that never evicts (every program's whole context
#: fits), the same compute and batch limit: no recompute at all, so what no ordering or cache
#: policy of the small pool can beat on finished/s (the bound behind the goals, measured)
#: ``--no-deferral``: ours without the prefill deferral (what it adds, measured beside it)
NO_DEFERRAL_ARM = Arm("agentconsole-no-deferral", True, "fcfs", defer_prefill=False)
BOUND_ARM = Arm("bound:lpm-no-evict", False, "lpm", pin_ranks=False, max_total_tokens=262_144)


@dataclass(frozen=True, slots=True)
class ArmRun:
    outcomes: list[ProgramOutcome]
    #: seconds of forward passes the engine ran (every rank; the plugin's ``busy_s``), None
    #: for the stock arms (no plugin to measure it)
    engine_busy_s: float | None
    #: ours: the runs the door's line learned (``--warm-line`` carries them to the next arm)
    learned: RunTimes | None = None


async def run_arm(
    arm: Arm,
    trace: list[TraceProgram],
    model: Path,
    args: argparse.Namespace,
    line: RunTimes | None = None,
) -> ArmRun:
    """One replay of ``trace`` on a fresh engine; ours starts its door's line from ``line``
    when given (what a server that ran a while has learned)."""
    settings = EngineSettings(
        model_path=model,
        plugin=arm.plugin,
        schedule_policy=arm.schedule_policy,
        max_total_tokens=arm.max_total_tokens or args.max_total_tokens,
        max_running_requests=args.max_running,
        enable_metrics=False,  # SGLang's metrics cannot be registered twice in one process
        dp=args.dp,
        pin_ranks=arm.pin_ranks,
    )
    # the fairness guard's aging bound and the preemption residency are production time
    # constants (seconds of GPU service); the workload runs faster (seed-mix 10x), so they are
    _, time_factor = TINY_WORKLOADS[args.workload]
    control = ControlState(
        fairness={"service_floor_s": 5.0 * time_factor},
        preemption={"min_residency_s": 0.25 * time_factor},
        deferral={} if arm.defer_prefill else {"max_decode_passes": 0},
    )
    runtime = SGLangRuntime(settings, policy=args.policy, control=control)
    await runtime.start()
    try:
        book = TextBook(runtime.engine.tokenizer_manager.tokenizer, seed=args.seed)
        if not arm.plugin:  # stock SGLang: agents calling it, no program glue at all
            service = CostServiceModel(CostModel.from_profile("cpu-2core__tiny-llama__tp1"))
            stock = await LiveReplay(runtime, trace, book, service).run()
            return ArmRun(stock, None)
        # ours is serve's own ProgramService (driver, door, tool-wait advisor), minus HTTP
        served = await replay_as_served(
            runtime,
            trace,
            book,
            policy=args.policy,
            door=arm.door,
            shortest_first=arm.shortest_first,
            learned=line,
        )
        if arm.door:  # how often the door held a program back, and whether contexts outgrew it
            gate = served.door
            print(f"  door: {gate.parked_total} waited, {gate.boundary_parks} boundary parks")
        return ArmRun(served.outcomes, await _engine_busy_s(runtime), served.run_times)
    finally:
        await runtime.stop()


async def _engine_busy_s(runtime: SGLangRuntime) -> float | None:
    """The forward-pass seconds every rank has run, from a status written after the last
    call ended (the plugin writes it about once a second)."""
    ended = time.time()
    for _ in range(50):
        status = runtime.read_status()
        if status is not None and status.written_at > ended:
            return status.busy_s
        await asyncio.sleep(0.1)
    return None


def print_table(results: dict[str, list[dict[str, float]]]) -> None:
    """Medians over repeats; ratios are ours over the engine's (below 1: ours is faster)."""

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    print(
        f"{'engine':<18} {'done/s':>7} {'P50 s':>7} {'P95 s':>7} {'mean s':>7} {'hit rate':>9} "
        f"{'P50 ratio':>10} {'P95 ratio':>10} {'engine s/prog':>14}"
    )
    for name in results:
        p50, p95 = med(name, "e2e_p50_s"), med(name, "e2e_p95_s")
        r50 = med("agentconsole", "e2e_p50_s") / p50 if p50 else float("nan")
        r95 = med("agentconsole", "e2e_p95_s") / p95 if p95 else float("nan")
        print(
            f"{name:<18} {med(name, 'finished_per_s'):7.2f} {p50:7.2f} {p95:7.2f} "
            f"{med(name, 'e2e_mean_s'):7.2f} "
            f"{med(name, 'cache_hit_rate'):9.1%} {r50:10.2f} {r95:10.2f} "
            f"{med(name, 'engine_s_per_program'):14.3f}"
        )
    if "agentconsole-rr" in results:
        # capacity: a saturated engine finishes programs at (its ranks) / (engine seconds a
        # program costs); done/s above is set by the run's longest program when it is not
        ours = med("agentconsole", "engine_s_per_program")
        print(
            f"engine seconds per program, round robin / affinity: "
            f"x{med('agentconsole-rr', 'engine_s_per_program') / ours:.2f}"
        )


def chosen_arms(arms: tuple[Arm, ...], names: str) -> tuple[Arm, ...]:
    """The arms named in ``names`` (comma-separated), in their usual order; ``agentconsole``
    always runs, since every ratio is ours over the others."""
    wanted = {name.strip() for name in names.split(",") if name.strip()} | {"agentconsole"}
    unknown = wanted - {arm.name for arm in arms}
    if unknown:
        known = ", ".join(arm.name for arm in arms)
        raise SystemExit(f"--arms: no arm {', '.join(sorted(unknown))} here (these run: {known})")
    return tuple(arm for arm in arms if arm.name in wanted)


async def main(args: argparse.Namespace) -> None:
    from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

    model = args.model or make_tiny_model(default_model_dir(RuntimeOptions()))
    make, _ = TINY_WORKLOADS[args.workload]
    trace = make(args.programs, args.rate, args.seed)
    if args.warm_up < 0 or args.warm_line < 0:
        raise SystemExit("--warm-up, --warm-line: a number of programs, 0 or more")
    arms: tuple[Arm, ...] = (*ARMS, DOOR_ARM, DOOR_ARRIVAL_ARM) if args.door else ARMS
    if args.dp > 1:
        arms = (arms[0], ROUND_ROBIN_ARM, *arms[1:])
    if args.no_deferral:
        arms = (arms[0], NO_DEFERRAL_ARM, *arms[1:])
    if args.bound:
        arms = (*arms, BOUND_ARM)
    if args.arms:
        arms = chosen_arms(arms, args.arms)
    results: dict[str, list[dict[str, float]]] = {arm.name: [] for arm in arms}
    if args.warm_up:
        # The first engine of a process paid its cold start inside the measured replay (on a
        # fresh machine, ours, always first, took 36 s of wall time against 21 s after): one
        # unmeasured run of a few programs first, and the order rotated per repetition.
        start = time.perf_counter()
        await run_arm(arms[0], trace[: args.warm_up], model, args)
        print(f"warm-up: {time.perf_counter() - start:.0f}s wall, not measured", flush=True)
    line = None
    if args.warm_line:
        # serve after it has served a while: its door's line has learned each kind's run (a
        # different draw of the workload, on an engine of its own: nothing else is carried)
        start = time.perf_counter()
        other_draw = make(args.warm_line, args.rate, args.seed + 1)
        line = (await run_arm(DOOR_ARM, other_draw, model, args)).learned
        print(f"warm line: {time.perf_counter() - start:.0f}s wall, not measured", flush=True)
    for rep in range(args.repeat):
        for arm in arms[rep % len(arms) :] + arms[: rep % len(arms)]:
            start = time.perf_counter()
            learned = line if arm.door and arm.shortest_first else None
            run = await run_arm(arm, trace, model, args, learned)
            outcomes = run.outcomes
            row = outcome_summary(outcomes)
            busy = run.engine_busy_s
            finished = row["finished"]
            row["engine_s_per_program"] = busy / finished if busy and finished else float("nan")
            # programs finished per second from the first arrival to the last end
            span = max((o.arrival_s + o.e2e_s for o in outcomes), default=0.0)
            row["finished_per_s"] = row["finished"] / span if span else 0.0
            results[arm.name].append(row)
            cancelled = int(row["cancelled"])
            by_trace = f" ({cancelled} cancelled by the trace)" if cancelled else ""
            print(
                f"[{rep}] {arm.name}: {row['finished']}/{row['programs']} programs{by_trace}, "
                f"P95 {row['e2e_p95_s']:.2f}s ({time.perf_counter() - start:.0f}s wall)",
                flush=True,
            )
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", type=int, default=60)
    p.add_argument("--rate", type=float, default=8.0, help="program arrivals per second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policy", default="cp-cache", help="our scheduling policy")
    p.add_argument("--max-running", type=int, default=2)
    p.add_argument("--max-total-tokens", type=int, default=12288)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--workload",
        choices=sorted(TINY_WORKLOADS),
        default="seed-mix",
        help="seed-mix (shared prefixes) or long-coding (growing private contexts)",
    )
    p.add_argument(
        "--warm-up",
        type=int,
        default=8,
        help="programs of an unmeasured first run (0: none)",
    )
    p.add_argument(
        "--door",
        action="store_true",
        help="also run ours with the program door on (overload): its line by response ratio"
        " (serve's default) and in arrival order",
    )
    p.add_argument(
        "--warm-line",
        type=int,
        default=0,
        help="first replay this many programs of another draw through the door, unmeasured, and"
        " start the response-ratio door arm's line from what it learned (0: a cold line)",
    )
    p.add_argument(
        "--bound",
        action="store_true",
        help="also run stock lpm with a pool that never evicts (the no-recompute bound)",
    )
    p.add_argument(
        "--no-deferral",
        action="store_true",
        help="also run ours with the prefill deferral off (what the deferral adds)",
    )
    p.add_argument(
        "--dp",
        type=int,
        default=1,
        help="SGLang data-parallel ranks per engine (> 1 adds ours with calls unpinned)",
    )
    p.add_argument(
        "--arms",
        default="",
        help="run only these arms (comma-separated names; e.g. agentconsole,agentconsole-rr "
        "with --dp 2 for affinity against round robin alone)",
    )
    return p.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
