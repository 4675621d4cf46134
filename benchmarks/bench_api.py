"""API overhead: latency the HTTP API adds to a call, and calls per second, against calling the
runtime directly. Both use the zero-cost simulated runtime (every engine step takes no time), so
what is measured is the software around the engine.

* direct: ``runtime.submit`` + read the stream + ``result()`` in-process (asyncio).
* API: ``agentconsole serve --runtime sim --time-scale 0`` in its own process (real DuckDB file,
  event hub, metrics, store writer), driven over loopback HTTP/1.1 keep-alive by a minimal
  asyncio client (a full HTTP client library costs more CPU per call than the server, and on
  2 cores it would compete with the server for the same CPUs).

A middle row runs the live service in-process without HTTP (controller, event hub, store
writer, metrics, projector), to split the overhead between the service and the HTTP stack.
Added latency = API percentile minus direct percentile, one call at a time. Throughput runs
``--concurrency`` calls in flight. ``--floor`` adds two rows measured the same way against
handlers that do no service work on serve's HTTP stack (``api_floor.py``): the bound no
service can beat. ``--no-express-lane`` serves every call through Litestar's router;
``--pairs N [--ab store-process|lane]`` runs N alternated pairs of the server without and with
a setting (DuckDB in its own process, the express lane; ``--lane-pairs N`` is ``--ab lane``)
and prints each pair and the medians (the goal's measurement, on one machine);
``--stored-nodes N`` starts each of those servers on a store that already holds N nodes.
Prints a table; ``--json`` also writes the numbers.

    .venv/bin/python benchmarks/bench_api.py [--calls 3000] [--concurrency 32] [--floor]
        [--no-express-lane] [--pairs N [--ab store-process|lane] [--stored-nodes N]]
        [--lane-pairs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from api_floor import floor_server

from agentconsole.scheduler.metrics import percentile
from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.app import build_live
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.intake import ChatCall
from agentconsole.server.runtime.registry import RuntimeOptions, create_runtime
from agentconsole.server.store import Store
from agentconsole.server.store.sqlconn import SqlConnection

CLI = str(Path(sys.executable).with_name("agentconsole"))
TOKENS = 16
#: Steady state: every path first runs this long unmeasured, which covers the server's
#: periodic work once (the store projector's first 1 s tick, the event lane's first commits,
#: DuckDB's first statements on each table) instead of timing one-off warm-up costs.
WARM_UP_S = 2.0


# -- direct ---------------------------------------------------------------------------------------
async def direct(calls: int, concurrency: int) -> tuple[list[float], float]:
    """Per-call latencies (sequential) and calls/s (``concurrency`` in flight)."""
    runtime = create_runtime("sim", RuntimeOptions(extra={"time_scale": 0.0}))
    await runtime.start()
    counter = 0

    async def one() -> None:
        nonlocal counter
        counter += 1
        ticket = CallTicket(f"p{counter}/n/1", f"p{counter}", "n", "t", time.time())
        stream = runtime.submit(
            GenerationRequest(ticket, "hello " * 20, TOKENS, forced_output_tokens=TOKENS)
        )
        async for _ in stream:
            pass
        await stream.result()

    latencies = await _one_at_a_time(one, calls)
    rate = await _throughput(one, calls, concurrency)
    await runtime.stop()
    return latencies, rate


async def _one_at_a_time(one: Any, calls: int) -> list[float]:
    """Seconds of each of ``calls`` awaits of ``one()``, run one after another, after
    :data:`WARM_UP_S` of the same calls unmeasured."""
    warm_until = time.perf_counter() + WARM_UP_S
    while time.perf_counter() < warm_until:
        await one()
    latencies = []
    for _ in range(calls):
        started = time.perf_counter()
        await one()
        latencies.append(time.perf_counter() - started)
    return latencies


async def _throughput(one: Any, calls: int, concurrency: int) -> float:
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await one()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return calls / (time.perf_counter() - started)


# -- the live service without HTTP ----------------------------------------------------------------
async def service_only(db: Path, calls: int, concurrency: int) -> tuple[list[float], float]:
    """The server's own work per call without the HTTP stack: the live service (controller,
    events to store, metrics and projector) over the zero-cost runtime, in-process."""
    config = ServerConfig(db_path=db, runtime="sim", runtime_extra={"time_scale": 0.0})
    store = Store.open(db)
    hub = EventHub(first_seq=store.repo.last_seq() + 1)
    live = build_live(config, store, None, hub)
    await live.service.runtime.start()
    live.service.runtime_ready.set()
    counter = 0

    async def one() -> None:
        nonlocal counter
        counter += 1
        chat = ChatCall(
            messages=[{"role": "user", "content": "hello " * 20}],
            max_tokens=TOKENS,
            program_id=f"svc-{counter // 100}",
            node_id=f"n{counter}",
            parent_ids=(),
            ignore_eos=True,
        )
        call = await live.service.start_call("default", chat)
        await call.outcome()

    latencies = await _one_at_a_time(one, calls)
    rate = await _throughput(one, calls, concurrency)
    await live.service.runtime.stop()
    store.close()
    return latencies, rate


# -- over HTTP ------------------------------------------------------------------------------------
class Connection:
    """One keep-alive HTTP/1.1 connection; ``post`` returns (status, body)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        return cls(*await asyncio.open_connection(host, port))

    async def post(self, path: str, body: bytes, headers: str) -> tuple[int, bytes]:
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n".encode()
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)


#: Calls per program of the ended programs ``--stored-nodes`` writes (as the benchmark's own).
STORED_NODES_PER_PROGRAM = 100


def store_with_history(db: Path, nodes: int) -> None:
    """Create the store at ``db`` holding ``nodes`` done nodes (one attempt each) of ended
    programs, as a server that has run a while keeps them: the tables the projector upserts
    into then have that many rows to scan."""
    programs = max(1, nodes // STORED_NODES_PER_PROGRAM)

    def fill(con: SqlConnection) -> None:
        con.execute(
            "INSERT INTO programs (program_id, tenant, state, labels, created_at, updated_at,"
            " finished_at, deadline, data) SELECT 'old-' || i, 'default', 'finished', [], 0, 0,"
            f" 0, NULL, '{{}}' FROM range({programs}) t(i)"
        )
        con.execute(
            "INSERT INTO nodes (program_id, node_id, kind, state, parents, attempt, created_at,"
            f" updated_at, data) SELECT 'old-' || (i // {STORED_NODES_PER_PROGRAM}), 'n' || i,"
            f" 'llm', 'done', [], 1, 0, 0, '{{}}' FROM range({nodes}) t(i)"
        )
        con.execute(
            "INSERT INTO attempts (program_id, node_id, attempt, state, started_at,"
            f" finished_at, data) SELECT 'old-' || (i // {STORED_NODES_PER_PROGRAM}), 'n' || i,"
            f" 1, 'done', 0, 0, '{{}}' FROM range({nodes}) t(i)"
        )

    with Store.open(db) as store:
        store.writer.call(fill).result()


def start_server(
    db: Path,
    *,
    express_lane: bool = True,
    env: dict[str, str] | None = None,
    serve_args: Sequence[str] = ("--time-scale", "0"),
) -> tuple[subprocess.Popen[str], str, int]:
    """Spawn ``agentconsole serve --runtime sim`` on a free port; return it, its host and port.

    ``serve_args`` go on its command line; the default runs the simulator without waiting
    (no real time passes in a step), which the API floor wants and a real-time load does not.
    """
    lane = "true" if express_lane else "false"
    proc = subprocess.Popen(
        [
            *(CLI, "serve", "--runtime", "sim", "--port", "0", "--db", str(db)),
            *("--log-level", "warning", *serve_args),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "AGENTCONSOLE_SERVER__EXPRESS_LANE": lane, **(env or {})},
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "agentconsole serving on " in line:
            host, port = line.rsplit("//", 1)[1].strip().split(":")
            return proc, host, int(port)
    raise RuntimeError("server did not start")


async def over_http(
    host: str, port: int, calls: int, concurrency: int
) -> tuple[list[float], float]:
    headers = "Authorization: Bearer sk-dev\r\n"
    counter = 0

    def body() -> bytes:
        nonlocal counter
        counter += 1
        program = f"bench-{counter // 100}"  # a fresh program every 100 calls
        return json.dumps(
            {
                "model": "sim",
                "max_tokens": TOKENS,
                "ignore_eos": True,
                "messages": [{"role": "user", "content": "hello " * 20}],
                "agentconsole": {"program_id": program, "node_id": f"n{counter}", "parent_ids": []},
            }
        ).encode()

    first = await Connection.open(host, port)

    async def sequential() -> None:
        status, _ = await first.post("/v1/chat/completions", body(), headers)
        assert status == 200, status

    latencies = await _one_at_a_time(sequential, calls)
    pool = [await Connection.open(host, port) for _ in range(concurrency)]
    free: asyncio.Queue[Connection] = asyncio.Queue()
    for conn in pool:
        free.put_nowait(conn)

    async def one() -> None:
        conn = await free.get()
        status, _ = await conn.post("/v1/chat/completions", body(), headers)
        assert status == 200, status
        free.put_nowait(conn)

    rate = await _throughput(one, calls, concurrency)
    return latencies, rate


def served(
    db: Path, calls: int, concurrency: int, *, express_lane: bool, env: dict[str, str] | None = None
) -> tuple[list[float], float]:
    """``over_http`` against a server of its own on ``db`` (``env``: settings to change)."""
    proc, host, port = start_server(db, express_lane=express_lane, env=env)
    try:
        return asyncio.run(over_http(host, port, calls, concurrency))
    finally:
        proc.terminate()
        proc.wait(30)


#: What ``--pairs`` can switch: the server's setting (an environment variable) for each arm.
AB_SETTINGS = {
    "lane": "AGENTCONSOLE_SERVER__EXPRESS_LANE",
    "store-process": "AGENTCONSOLE_STORE__OWN_PROCESS",
}


def ab_pairs(setting: str, pairs: int, calls: int, concurrency: int, stored_nodes: int = 0) -> None:
    """A/B of one server setting: ``pairs`` alternated runs (``setting`` false, then true),
    each against the same direct run's p99, each on a store holding ``stored_nodes`` nodes
    of ended programs; prints every pair and the medians of calls/s and p99 added."""
    variable = AB_SETTINGS[setting]
    d_lat, _ = asyncio.run(direct(calls, concurrency))
    d99 = percentile(d_lat, 99)
    ms = 1000.0
    rows: list[tuple[float, float, float, float]] = []
    history = f", {stored_nodes:,} nodes stored before" if stored_nodes else ""
    print(f"{setting}: {variable} false, then true{history}")
    print(f"{'pair':>4}{'calls/s off':>13}{'on':>8}{'p99 added off ms':>18}{'on':>8}")
    for n in range(1, pairs + 1):
        figures = []
        for value in ("false", "true"):
            with tempfile.TemporaryDirectory() as tmp:
                if stored_nodes:
                    store_with_history(Path(tmp) / "bench.duckdb", stored_nodes)
                lat, rate = served(
                    Path(tmp) / "bench.duckdb",
                    calls,
                    concurrency,
                    express_lane=True,  # the lane's own arm: ``env`` overrides it
                    env={variable: value},
                )
            figures += [rate, (percentile(lat, 99) - d99) * ms]
        off_rate, off_p99, on_rate, on_p99 = figures
        rows.append((off_rate, on_rate, off_p99, on_p99))
        print(f"{n:>4}{off_rate:>13.0f}{on_rate:>8.0f}{off_p99:>18.3f}{on_p99:>8.3f}")
    med = [statistics.median(column) for column in zip(*rows, strict=True)]
    ratios = statistics.median(on / off for off, on, _, _ in rows)
    print(f"{'med':>4}{med[0]:>13.0f}{med[1]:>8.0f}{med[2]:>18.3f}{med[3]:>8.3f}")
    print(
        f"calls/s with {setting} / without (median of pairs): x{ratios:.2f};"
        " goals: p99 added <= 1.5 ms, >= 4000 calls/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--floor", action="store_true", help="also measure api_floor.py")
    parser.add_argument(
        "--no-express-lane",
        action="store_true",
        help="serve every call through Litestar (server.express_lane false), for A/B runs;"
        " the server's AGENTCONSOLE_SERVER__EXPRESS_LANE is set either way",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=0,
        metavar="N",
        help="instead: N alternated runs of the server without and with --ab's setting, "
        "each pair's calls/s and p99 added, and the medians",
    )
    parser.add_argument(
        "--ab",
        choices=sorted(AB_SETTINGS),
        default="store-process",
        help="the setting --pairs switches: the express lane, or DuckDB in a process of its own"
        " (either way everything else as serve's defaults)",
    )
    parser.add_argument(
        "--lane-pairs", type=int, default=0, metavar="N", help="the same as --pairs N --ab lane"
    )
    parser.add_argument(
        "--stored-nodes",
        type=int,
        default=0,
        metavar="N",
        help="with --pairs: each server starts on a store that already holds N nodes of ended"
        " programs (a server that has run a while)",
    )
    args = parser.parse_args()
    if args.pairs or args.lane_pairs:
        setting = "lane" if args.lane_pairs else args.ab
        ab_pairs(
            setting, args.pairs or args.lane_pairs, args.calls, args.concurrency, args.stored_nodes
        )
        return
    d_lat, d_rate = asyncio.run(direct(args.calls, args.concurrency))
    with tempfile.TemporaryDirectory() as tmp:
        s_lat, s_rate = asyncio.run(service_only(Path(tmp) / "svc.duckdb", args.calls, 32))
        a_lat, a_rate = served(
            Path(tmp) / "bench.duckdb",
            args.calls,
            args.concurrency,
            express_lane=not args.no_express_lane,
        )
    floors = []
    for kind in ("bare", "shaped") if args.floor else ():
        with floor_server(kind) as (host, port):
            floors.append((kind, *asyncio.run(over_http(host, port, args.calls, args.concurrency))))
    ms = 1000.0
    rows = [
        ("runtime direct", percentile(d_lat, 50) * ms, percentile(d_lat, 99) * ms, d_rate),
        ("service, no HTTP", percentile(s_lat, 50) * ms, percentile(s_lat, 99) * ms, s_rate),
        ("through the API", percentile(a_lat, 50) * ms, percentile(a_lat, 99) * ms, a_rate),
    ]
    for kind, f_lat, f_rate in floors:
        f50, f99 = percentile(f_lat, 50) * ms, percentile(f_lat, 99) * ms
        rows.append((f"floor: {kind}", f50, f99, f_rate))
    added = (rows[2][1] - rows[0][1], rows[2][2] - rows[0][2])
    print(
        f"zero-cost sim runtime, {TOKENS} output tokens per call, {os.cpu_count()} CPUs,"
        f" {args.calls} calls, throughput at {args.concurrency} in flight"
    )
    print(f"{'':18}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}")
    for name, p50, p99, rate in rows:
        print(f"{name:18}{p50:9.3f}{p99:9.3f}{rate:10.0f}")
    print(f"{'added by the API':18}{added[0]:9.3f}{added[1]:9.3f}")
    print(
        f"mean API latency {statistics.fmean(a_lat) * ms:.3f} ms; goals: p99 added <= 1.5 ms,"
        f" >= 4000 calls/s"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "direct": {"p50_ms": rows[0][1], "p99_ms": rows[0][2], "calls_per_s": d_rate},
                    "service": {"p50_ms": rows[1][1], "p99_ms": rows[1][2], "calls_per_s": s_rate},
                    "api": {"p50_ms": rows[2][1], "p99_ms": rows[2][2], "calls_per_s": a_rate},
                    "added": {"p50_ms": added[0], "p99_ms": added[1]},
                    "floors": {
                        name: {"p50_ms": p50, "p99_ms": p99, "calls_per_s": rate}
                        for name, p50, p99, rate in rows[3:]
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
