"""soak: many agents for a while; does the server hold steady (T1 of the test plan)?

``--agents`` agents run multi-step programs back to back for ``--duration`` seconds: a chat
call, a tool call through the gateway (the ``sleep`` builtin: the agent waits on a tool),
``--steps`` times, then ``/finish``. Figures: events, calls/s, latency percentiles and the
server's RSS at the end of warm-up against the end of the run. Then serve stops cleanly and
the store is read back: its event log must be whole, and ``/metrics`` (read before the stop)
must count what the store holds and what the agents were answered.

Finished programs leave memory after ``limits.retain_finished_s`` (set to 5 s here, 600 s by
default), so that a short run reaches the steady state a long one would.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from .agent import Ledger, client_limits, run_program
from .eventlog import audit_event_log
from .report import Report, ms, percentile
from .serve import TENANT, ServeProcess, metric_values, register_tools, start_serve

#: A fixed KV pool, as a real engine has (SGLang preallocates it): the simulated H200 preset's
#: default (912K GPU + 1.57M host tokens) takes longer than a soak to fill, and until the cache
#: is full its index grows with every program, as SGLang's radix tree does until its pool fills.
POOL_TOKENS = 200_000
SETTINGS: dict[str, dict[str, Any]] = {
    "limits": {"retain_finished_s": 5},
    "runtime": {"max_total_tokens": POOL_TOKENS, "extra": {"host_kv_tokens": POOL_TOKENS}},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=50, help="concurrent agents")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of load")
    parser.add_argument("--steps", type=int, default=5, help="chat + tool calls per program")
    parser.add_argument("--tool-seconds", type=float, default=0.2, help="each tool's latency")
    parser.add_argument(
        "--warm-up", type=float, default=0.25, help="fraction of the run before the RSS baseline"
    )
    parser.add_argument("--max-rss-growth", type=float, default=10.0, help="percent allowed")


async def _load(server: ServeProcess, args: argparse.Namespace, ledger: Ledger) -> list[int]:
    """Run the agents until the deadline; returns the server's RSS sampled each second."""
    deadline = time.monotonic() + args.duration
    limits = client_limits(args.agents + 8)

    async def agent(client: httpx.AsyncClient, a: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            await run_program(
                client, ledger, f"soak-{a}-{n}", args.steps, tool_seconds=args.tool_seconds
            )
            n += 1

    async def sample(samples: list[int]) -> None:
        while time.monotonic() < deadline:
            samples.append(server.rss_bytes())
            await asyncio.sleep(1.0)

    rss: list[int] = []
    async with httpx.AsyncClient(
        base_url=server.url, headers=TENANT, timeout=60, limits=limits
    ) as client:
        await asyncio.gather(sample(rss), *(agent(client, a) for a in range(args.agents)))
    rss.append(server.rss_bytes())
    return rss


def run(args: argparse.Namespace, command: str) -> Report:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="reliability-soak-"))
    db = workdir / "soak.duckdb"
    server = start_serve(db, SETTINGS)
    ledger = Ledger()
    try:
        register_tools(server.url)
        since = time.monotonic()
        rss = asyncio.run(_load(server, args, ledger))
        elapsed = time.monotonic() - since
        metrics = metric_values(server.url)
    finally:
        code = server.stop()
    audit = audit_event_log(db)
    report = Report("soak", command)
    f = report.figures
    calls = len(ledger.chat_latencies)
    f["agents x duration"] = f"{args.agents} x {args.duration:g} s ({elapsed:.1f} s with the tails)"
    f["programs started / finished"] = f"{ledger.programs_started} / {ledger.programs_finished}"
    f["chat calls / tool calls"] = f"{calls} / {len(ledger.tool_latencies)}"
    f["chat calls/s"] = round(calls / elapsed, 1)
    f["events in the log / per s"] = f"{audit.events} / {audit.events / elapsed:.0f}"
    for name, values in (("chat", ledger.chat_latencies), ("tool", ledger.tool_latencies)):
        f[f"{name} latency p50 / p99 / max (ms)"] = (
            f"{ms(percentile(values, 50))} / {ms(percentile(values, 99))} / "
            f"{ms(max(values, default=float('nan')))}"
        )
    warm = rss[min(len(rss) - 1, int(len(rss) * args.warm_up))]
    growth = 100.0 * (rss[-1] - warm) / warm
    f["server RSS warm-up / end / peak (MiB)"] = (
        f"{warm / 2**20:.0f} / {rss[-1] / 2**20:.0f} / {max(rss) / 2**20:.0f}"
    )
    f["RSS growth after warm-up (%)"] = round(growth, 1)
    quarters = [rss[min(len(rss) - 1, len(rss) * q // 4)] / 2**20 for q in (1, 2, 3, 4)]
    f["RSS at 1/4, 1/2, 3/4, end of the run (MiB)"] = " / ".join(f"{m:.0f}" for m in quarters)
    f["refused or lost requests"] = repr(dict(ledger.errors))
    counted = {
        "programs created": (
            metrics.get("agentconsole_programs_created_total"),
            audit.kinds["program.created"],
            ledger.programs_started,
        ),
        "calls finished": (
            metrics.get("agentconsole_llm_calls_finished_total"),
            audit.kinds["call.finished"],
            calls,
        ),
        "output tokens": (
            metrics.get("agentconsole_generation_tokens_total"),
            audit.output_tokens,
            ledger.output_tokens,
        ),
    }
    for name, (prom, stored, answered) in counted.items():
        f[f"{name}: /metrics / store / answered"] = f"{prom or 0:.0f} / {stored} / {answered}"
    report.check("every request answered", not ledger.errors, dict(ledger.errors))
    audit.check(report)

    mismatched = [n for n, (p, s, a) in counted.items() if not (p == s == a)]
    report.check("/metrics counters = store counts = answers", not mismatched, mismatched)
    report.check(
        f"RSS growth after warm-up <= {args.max_rss_growth:g}%",
        growth <= args.max_rss_growth,
        f"{growth:.1f}%",
    )
    report.check("clean stop", code == 0, f"exit status {code}")
    return report
