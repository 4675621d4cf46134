"""Tool-gateway benchmark: per-call overhead of the pipeline on a real DuckDB file.

Run: ``.venv/bin/python benchmarks/bench_gateway.py [--calls N] [--concurrency C] [--dir PATH]``.
Measured in-process (no HTTP), with the ``echo`` builtin so the tool itself costs nothing:

* ``first call``: a new key each time: validation, the durable claim (one commit), the
  execution and the durable result (a second commit);
* ``replay``: the same keys again: validation and one claim that finds the result;
* ``refused``: arguments that fail the schema (no store access at all);
* ``duplicates``: C concurrent calls of each of N / C keys: one execution per key.

Reference goal: the gateway adds far less than a tool's own latency (tools take 50 ms-10 s,
seed section 19); the two fsyncs of a first call dominate it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentconsole.scheduler.program import ToolSpec
from agentconsole.server.gateway import ToolGateway
from agentconsole.server.gateway.errors import GatewayError
from agentconsole.server.store import Store

PARAMS = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 100}},
    "additionalProperties": False,
}


class NullPort:
    """A program core that accepts everything (the gateway's own cost is measured)."""

    async def check_program(self, tenant: str, program_id: str) -> None:
        return None

    async def ensure_tool_node(
        self, tenant: str, program_id: str, node_id: str, tool: ToolSpec
    ) -> None:
        return None

    async def tool_started(self, program_id: str, node_id: str, *, repeat: bool = False) -> None:
        return None

    async def tool_finished(
        self,
        program_id: str,
        node_id: str,
        outcome: str,
        latency_s: float | None,
        result_bytes: int = 0,
    ) -> None:
        return None


def _body(node: str, text: object) -> bytes:
    return json.dumps(
        {"program_id": "bench", "node_id": node, "arguments": {"text": text}}
    ).encode()


async def _timed(n: int, one: Callable[[int], Awaitable[object]]) -> list[float]:
    latencies = []
    for i in range(n):
        started = time.perf_counter()
        with contextlib.suppress(GatewayError):
            await one(i)
        latencies.append(time.perf_counter() - started)
    return latencies


def _row(name: str, latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{name:<12} n={len(ordered):>6}  p50 {statistics.median(ordered) * 1e3:7.2f} ms"
        f"  p99 {p99 * 1e3:7.2f} ms"
    )


async def run(calls: int, concurrency: int, folder: Path) -> list[str]:
    """Every measurement, as printable rows."""
    store = Store.open(folder / "bench.duckdb")
    gateway, port = ToolGateway(store), NullPort()
    await gateway.start()
    body = {"name": "echo", "parameters": PARAMS, "executor": {"type": "builtin", "name": "echo"}}
    await gateway.register("t", False, json.dumps(body).encode())
    rows = [
        _row(
            "first call",
            await _timed(calls, lambda i: gateway.call("t", "echo", _body(f"n{i}", "x"), port)),
        ),
        _row(
            "replay",
            await _timed(calls, lambda i: gateway.call("t", "echo", _body(f"n{i}", "x"), port)),
        ),
        _row(
            "refused",
            await _timed(calls, lambda i: gateway.call("t", "echo", _body(f"r{i}", 5), port)),
        ),
    ]
    before = gateway.runner.executions
    started = time.perf_counter()
    await asyncio.gather(
        *(gateway.call("t", "echo", _body(f"d{i // concurrency}", "x"), port) for i in range(calls))
    )
    elapsed = time.perf_counter() - started
    executed = gateway.runner.executions - before
    rows.append(
        f"duplicates   {calls} calls x{concurrency} per key: {executed} executions,"
        f" {calls / elapsed:,.0f} calls/s"
    )
    await gateway.close()
    store.close()
    return rows


def main() -> None:
    """Parse the flags, run, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for row in asyncio.run(run(args.calls, args.concurrency, Path(folder))):
            print(row)


if __name__ == "__main__":
    main()
