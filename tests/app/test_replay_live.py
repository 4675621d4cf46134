"""``agentconsole replay`` against live servers: the minimal test app (fast fake chat) and
the real app with the simulated runtime."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentconsole.replay import ReplayOptions, run_replay
from agentconsole.replay.demo import run_demo
from agentconsole.sample_traces import (
    LLMNode,
    Outcome,
    ToolAttempt,
    ToolKind,
    ToolNode,
    TraceProgram,
    load_trace,
)
from tests.server.gateway.spawn import ROOT, ServerProcess

pytestmark = pytest.mark.e2e
KEYS = {f"tenant-{t}": f"sk-tenant-{t}" for t in "abcd"}
OPERATOR = {"Authorization": "Bearer sk-operator"}


def _tool(
    node_id: str, parent: str, *attempts: tuple[float, Outcome], effect: bool = False
) -> ToolNode:
    return ToolNode(
        id=node_id,
        parents=(parent,),
        tool="web",
        tool_kind=ToolKind.SEARCH,
        side_effect=effect,
        idempotent=not effect,
        timeout_s=5.0,
        result_tokens=20,
        attempts=tuple(ToolAttempt(latency_s=s, outcome=o) for s, o in attempts),
    )


def _program(pid: str, tenant: str, arrival: float, cancel_at: float | None = None) -> TraceProgram:
    return TraceProgram(
        id=pid,
        tenant=tenant,
        workload="test",
        shape="serial",
        arrival_s=arrival,
        cancel_at_s=cancel_at,
        nodes=(
            LLMNode(id="n0", prompt_tokens=40, output_tokens=10),
            _tool("t1", "n0", (5.0, Outcome.TIMEOUT), (0.2, Outcome.OK)),
            _tool("t2", "n0", (0.1, Outcome.OK), effect=True),
            LLMNode(id="n1", parents=("t1", "t2"), prompt_tokens=5, output_tokens=10),
        ),
    )


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("replay-mini")
    with ServerProcess(tmp / "store.duckdb", tmp / "ledger.jsonl") as proc:
        yield proc


@pytest.mark.parametrize("tools", ["gateway", "agent"])
def test_replay_finishes_programs_honours_cancels_and_retries_tools(
    mini: ServerProcess, tools: str
) -> None:
    programs = [_program(f"p{i}", f"tenant-{'ab'[i % 2]}", i * 0.5) for i in range(4)]
    programs.append(_program("late-cancel", "tenant-c", 0.0, cancel_at=0.5))
    options = ReplayOptions(tools="agent" if tools == "agent" else "gateway", id_prefix=f"{tools}-")
    seen: list[str] = []
    summary = asyncio.run(
        run_replay(
            mini.base_url,
            KEYS,
            programs,
            10.0,
            options=options,
            progress=lambda o: seen.append(o.state),
        )
    )
    assert summary.count("finished") == 4
    assert summary.count("cancelled") == 1
    assert sorted(seen) == ["cancelled"] + ["finished"] * 4
    assert summary.e2e(50) is not None
    with httpx.Client(base_url=mini.base_url, headers={"Authorization": "Bearer sk-tenant-c"}) as c:
        assert c.get(f"/v1/programs/{tools}-late-cancel").json()["state"] == "cancelled"
    calls = httpx.get(
        f"{mini.base_url}/v1/operator/tool-calls", params={"limit": 1000}, headers=OPERATOR
    ).json()["tool_calls"]
    mine = [c for c in calls if c["program_id"].startswith(f"{tools}-p")]
    if tools == "gateway":  # per program: t1 twice (a timeout, then the retry), t2 once
        assert len(mine) == 4 * 3
        assert {c["tool"] for c in mine} == {"replay.sleep", "replay.sleep_effect"}
        assert sorted({c["state"] for c in mine}) == ["committed", "retryable"]
    else:
        assert mine == []
    assert all(
        o.tool_calls == (3 if tools == "gateway" else 2)
        for o in summary.outcomes
        if o.state == "finished"
    )


def test_a_stop_event_skips_programs_that_have_not_arrived(mini: ServerProcess) -> None:
    async def stopped_early() -> tuple[int, int]:
        stop = asyncio.Event()
        programs = [_program(f"s{i}", "tenant-a", 0.0 if i == 0 else 30.0) for i in range(3)]
        options = ReplayOptions(tools="agent", id_prefix="stop-")
        replay = asyncio.create_task(
            run_replay(mini.base_url, KEYS, programs, 1.0, stop, options=options)
        )
        await asyncio.sleep(0.3)
        stop.set()
        summary = await asyncio.wait_for(replay, 10)
        return summary.count("skipped"), summary.count("cancelled")

    assert asyncio.run(stopped_early()) == (2, 1)


def test_the_cli_replays_the_bundled_trace_against_the_real_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tmp = tmp_path_factory.mktemp("replay-real")
    with ServerProcess(tmp / "store.duckdb", tmp / "ledger.jsonl", real=True) as server:
        keys = [arg for t, k in KEYS.items() for arg in ("--key", f"{t}={k}")]
        done = subprocess.run(
            [
                str(Path(sys.executable).with_name("agentconsole")),
                "replay",
                "--url",
                server.base_url,
                "--speed",
                "40",
                "--token-scale",
                "0.02",
                "--max-output-tokens",
                "32",
                "--programs",
                "6",
                "--id-prefix",
                "run1-",
                *keys,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "programs: 6  finished: 6" in done.stdout
        assert "E2E (finished): p50" in done.stdout
        trace = load_trace(ROOT / "sample_traces" / "seed-mix.small.jsonl")[:6]
        with httpx.Client(base_url=server.base_url, headers=OPERATOR) as client:
            served = [client.get(f"/v1/programs/run1-{p.id}").json() for p in trace]
        assert {p["state"] for p in served} == {"finished"}
        # deadlines as recorded, not divided by --speed (the LLM calls keep the server's pace:
        # a divided one made every program late, and a trace recorded from it kept it)
        relative = [
            None if p["deadline"] is None else p["deadline"] - p["created_at"] for p in served
        ]
        recorded = [p.deadline_s for p in trace]
        assert relative == pytest.approx(recorded, abs=0.01)


def test_the_demo_runs_a_round_in_the_background(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("demo")
    trace = load_trace(ROOT / "sample_traces" / "seed-mix.small.jsonl")
    with ServerProcess(tmp / "store.duckdb", tmp / "ledger.jsonl", real=True) as server:
        server_keys = {k: t for t, k in KEYS.items()}
        asyncio.run(
            asyncio.wait_for(run_demo(server.base_url, server_keys, rounds=1, speed=50), 120)
        )
        listing = httpx.get(
            f"{server.base_url}/v1/operator/tool-calls", params={"limit": 1000}, headers=OPERATOR
        ).json()["tool_calls"]
    assert {c["program_id"].split("-", 3)[-1] for c in listing} <= {p.id for p in trace}
    assert len({c["program_id"] for c in listing}) == len(trace)
