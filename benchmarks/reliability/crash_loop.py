"""crash-loop: kill -9 the server while agents work, restart it on the same DuckDB file, and
check that nothing it acknowledged was lost (T2 of the research notes' test plan).

Each round starts serve, runs ``--programs`` agents (chat calls and tool calls through the
gateway; one agent goes on with a program of the previous round, across the restart) and
kills the server: at a random moment (SIGKILL from outside) or, every third round, at a named
crash point (``AGENTCONSOLE_CRASH_AT``, the store's and the gateway's points in turn). The
next start must open the file and hold:

* every node the client saw acknowledged *and* synced: a ``GET /v1/programs`` answer means
  everything before it has committed (the projector writes and the writer flushes), so nodes
  answered before such a barrier are durable; LLM nodes among them are ``done``;
* every tool call answered 200 (committed before the answer): its retry is ``replayed``
  with the same result;
* at the end (clean stop), an event log with ``seq`` 1..N, no repeat, no duplicated event.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from pathlib import Path

import httpx

from .agent import Ledger, ToolAck, client_limits, run_program
from .crash_verify import Loop, verify
from .eventlog import audit_event_log
from .report import Report, percentile
from .serve import TENANT, ServeFailed, ServeProcess, register_tools, start_serve

POINTS = (
    "mid_batch_commit",
    "before_intent_commit",
    "after_intent_commit",
    "after_external_call",
    "before_result_commit",
    "after_result_commit_before_ack",
    "during_checkpoint",
)
#: programs stay running across the whole loop (a finished one would refuse tool retries)
SETTINGS = {"limits": {"program_idle_s": 3600}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=20, help="kill/restart rounds")
    parser.add_argument("--programs", type=int, default=8, help="agents per round")
    parser.add_argument("--steps", type=int, default=6, help="chat + tool calls per program")
    parser.add_argument(
        "--kill-after",
        type=float,
        nargs=2,
        default=(0.3, 2.5),
        metavar=("MIN_S", "MAX_S"),
        help="random kill window",
    )
    parser.add_argument(
        "--point-every", type=int, default=3, help="every Nth round dies at a named crash point"
    )
    parser.add_argument(
        "--max-ready-s", type=float, default=5.0, help="the restart-to-ready p95 allowed"
    )
    parser.add_argument("--seed", type=int, default=16)


async def _round(
    server: ServeProcess,
    args: argparse.Namespace,
    r: int,
    rng: random.Random,
    loop: Loop,
    carried: str | None,
    point: bool,
) -> tuple[Ledger, dict[str, set[str]]]:
    """One round of work, ended by a kill; returns what the server acknowledged and the
    part of it known durable."""
    ledger = Ledger()
    durable: dict[str, set[str]] = {}
    limits = client_limits(args.programs + 4)
    async with httpx.AsyncClient(
        base_url=server.url, headers=TENANT, timeout=10, limits=limits
    ) as client:
        agents = []
        for i in range(args.programs):
            pid, prefix = (carried, f"r{r}-") if i == 0 and carried else (f"r{r}-p{i}", "")
            agents.append(
                run_program(client, ledger, pid, args.steps, node_prefix=prefix, finish=False)
            )
        work = asyncio.gather(*agents)

        async def barriers() -> None:  # what was answered before a listing is durable
            while not work.done():
                acked = ledger.snapshot()
                try:
                    listed = await client.get("/v1/programs", params={"limit": 1})
                except httpx.HTTPError:
                    return
                if listed.status_code == 200:
                    for pid, nodes in acked.items():
                        durable.setdefault(pid, set()).update(nodes)
                await asyncio.sleep(0.2)

        syncing = asyncio.ensure_future(barriers())
        if point:
            await work
        else:
            await asyncio.wait({work}, timeout=rng.uniform(*args.kill_after))
            if server.alive:
                server.kill()
                loop.killed_at_random += 1
            await work
        await syncing
    for pid, nodes in durable.items():
        loop.durable.setdefault(pid, set()).update(nodes)
    return ledger, durable


def run(args: argparse.Namespace, command: str) -> Report:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="reliability-crash-"))
    db = workdir / "crash.duckdb"
    rng = random.Random(args.seed)
    loop = Loop()
    carried: str | None = None
    pending: tuple[dict[str, set[str]], dict[str, ToolAck], dict[str, set[str]]] = ({}, {}, {})
    for r in range(args.rounds + 1):
        try:
            server = start_serve(db, SETTINGS)
        except ServeFailed as error:
            loop.reopen_failures.append(f"round {r}: {str(error)[-300:]}")
            break
        loop.starts += 1
        if r == 0:
            register_tools(server.url)
            loop.fresh_ready_s = server.ready_s
        else:
            loop.ready_s.append(server.ready_s)
        asyncio.run(verify(server.url, loop, *pending))
        if r == args.rounds:  # the last start only checks, then everything once more
            asyncio.run(verify(server.url, loop, loop.durable, loop.tools))
            server.stop()
            break
        point = None
        every = args.point_every
        if r % every == every - 1:  # a crash point: the idle server goes, an armed one starts
            server.kill()
            point = POINTS[(r // every) % len(POINTS)]
            # a point passes once per group commit, which holds several calls' writes
            passes = max(1, args.programs * args.steps // 4)
            n = 1 if point == "during_checkpoint" else rng.randint(1, passes)
            try:
                server = start_serve(db, SETTINGS, env={"AGENTCONSOLE_CRASH_AT": f"{point}:{n}"})
            except ServeFailed as error:
                if error.returncode != -9:  # not the crash point: the file did not open
                    loop.reopen_failures.append(f"round {r}: {str(error)[-300:]}")
                    break
                loop.points_reached.append(f"{point}:{n} (at start)")
                continue
            loop.starts += 1
        ledger, durable = asyncio.run(
            _round(server, args, r, rng, loop, carried, point is not None)
        )
        if point is not None:
            reached = server.proc.poll() == -9
            loop.points_reached += [f"{point}:{n}"] if reached else []
            loop.points_missed += 0 if reached else 1
            server.kill()
        loop.tools.update(ledger.tools)
        unsynced = {p: n - durable.get(p, set()) for p, n in ledger.nodes.items()}
        pending = (durable, ledger.tools, unsynced)
        carried = next((p for p in ledger.nodes if p.startswith(f"r{r}-p0")), carried)
    return _report(args, command, db, loop)


def _report(args: argparse.Namespace, command: str, db: Path, loop: Loop) -> Report:
    report = Report("crash-loop", command)
    audit = audit_event_log(db) if not loop.reopen_failures else None
    f = report.figures
    f["rounds"] = args.rounds
    f["programs per round x steps"] = f"{args.programs} x {args.steps} (chat + tool)"
    f["server starts"] = loop.starts
    f["killed at a random moment"] = loop.killed_at_random
    f["killed at a crash point"] = len(loop.points_reached)
    f["crash points reached"] = ", ".join(loop.points_reached) or "none"
    f["crash point not reached (killed after the work)"] = loop.points_missed
    f["restart-to-ready p50 / p95 / max (s)"] = (
        f"{percentile(loop.ready_s, 50):.2f} / {percentile(loop.ready_s, 95):.2f} / "
        f"{max(loop.ready_s, default=float('nan')):.2f}"
    )
    f["first start (new file) to ready (s)"] = round(loop.fresh_ready_s, 2)
    f["acknowledged nodes checked"] = loop.checked_nodes
    f["committed tool calls replayed"] = loop.checked_tools
    f["answered nodes with no barrier after them: kept / checked"] = (
        f"{loop.unsynced[0] - loop.unsynced[1]} / {loop.unsynced[0]}"
    )
    f["programs"] = len(loop.durable)
    if audit is not None:
        f["events in the log"] = audit.events
    report.check(
        "reopen succeeds every time",
        not loop.reopen_failures,
        loop.reopen_failures[:1] or f"{loop.starts}/{loop.starts}",
    )
    report.check(
        "0 acknowledged nodes lost",
        not loop.lost_nodes,
        f"{len(loop.lost_nodes)} lost {loop.lost_nodes[:3]}",
    )
    report.check(
        "acknowledged LLM nodes are done after restart",
        not loop.undone_nodes,
        f"{len(loop.undone_nodes)} not done {loop.undone_nodes[:3]}",
    )
    report.check(
        "0 committed tool results lost (retry replays them)",
        not loop.lost_tools,
        f"{len(loop.lost_tools)} lost {loop.lost_tools[:3]}",
    )
    if audit is not None:
        audit.check(report)
    else:
        report.check("event log read after the last stop", False, "a start failed")
    p95 = percentile(loop.ready_s, 95)
    report.check(
        f"restart-to-ready p95 <= {args.max_ready_s:g} s", p95 <= args.max_ready_s, f"{p95:.2f} s"
    )
    return report
