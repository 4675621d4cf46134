"""Parity of the program driver's two carriers: one event script, played by the simulator
(``bench``) and by the live service (``serve``), must reach the driver as the same questions
in the same order and come back as the same decisions.

The script: a program calls the model, starts two tools (a fast search and a slow test run),
takes their results in a second call and finishes; a second program calls the model, starts a
tool and is cancelled while it waits. Both carriers run with the same tool-wait advisor (a
fixed rule, so decisions depend only on what the driver asks), and the test records every
driver call and every action it returned.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentconsole.sample_traces.codec import loads_trace
from agentconsole.scheduler.actions import (
    Action,
    CacheHint,
    KvAdvice,
    ProgramEnded,
    StartPrograms,
    ToolWaitFacts,
)
from agentconsole.scheduler.doorroom import door_size
from agentconsole.scheduler.driver import ProgramDriver
from agentconsole.scheduler.program import ToolKind, ToolSpec
from agentconsole.scheduler.runtime import CacheAction, MemoryView
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.intake import ChatCall
from agentconsole.server.live.service import DoorSettings, ProgramService
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

COST = preset("H200-141GB", "llama-3.1-8b", 1)
TENANT = "t"
TOOLS = {"tool-2": ("web_search", "search"), "tool-3": ("run_tests", "test_run")}


def _trace() -> str:
    def llm(node_id: str, parents: list[str]) -> dict[str, Any]:
        return {
            "id": node_id,
            "kind": "llm",
            "parents": parents,
            "prompt_tokens": 300,
            "output_tokens": 20,
        }

    def tool(node_id: str, latency: float) -> dict[str, Any]:
        name, kind = TOOLS[node_id]
        return {
            "id": node_id,
            "kind": "tool",
            "parents": ["llm-1"],
            "tool": name,
            "tool_kind": kind,
            "timeout_s": 600.0,
            "result_tokens": 50,
            "attempts": [{"latency_s": latency, "outcome": "ok"}],
        }

    finished = {
        "id": "par-1",
        "tenant": TENANT,
        "workload": "parity",
        "shape": "parity",
        "arrival_s": 0.0,
        "nodes": [
            llm("llm-1", []),
            tool("tool-2", 0.5),
            tool("tool-3", 30.0),
            llm("llm-4", ["tool-2", "tool-3"]),
        ],
    }
    cancelled = {
        "id": "par-2",
        "tenant": TENANT,
        "workload": "parity",
        "shape": "parity",
        "arrival_s": 100.0,
        "cancel_at_s": 50.0,
        "nodes": [llm("llm-1", []), tool("tool-3", 300.0)],
    }
    return "\n".join(json.dumps(p) for p in (finished, cancelled))


class FixedAdvisor:
    """Keep the context for the slowest tool's 90th percentile; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float]] = []

    def advise(self, facts: ToolWaitFacts, memory: MemoryView, now: float) -> KvAdvice:
        del memory, now
        retain = facts.latency.quantile(0.9)
        self.asked.append((facts.program_id, round(retain, 6)))
        return KvAdvice(CacheAction.KEEP, retain, retain, {"action": "keep"})


@dataclass
class Recorder:
    """Wraps a driver: records each event it is fed and each action it returns."""

    driver: ProgramDriver
    log: list[tuple[Any, ...]] = field(default_factory=list)

    def install(self) -> None:
        d = self.driver

        def wrap(name: str, key: Any) -> None:
            original = getattr(d, name)

            def recorded(*args: Any, **kwargs: Any) -> Any:
                out = original(*args, **kwargs)
                self.log.append((name, *key(*args, **kwargs)))
                if isinstance(out, list):
                    self.log += [_action(a) for a in out]
                return out

            setattr(d, name, recorded)

        wrap(
            "arrive",
            # each carrier probes what its engine holds of the first prompt, and the door
            # sizes by one rule (the counts differ: serve's prompt carries the chat template)
            lambda pid, tokens, memory, now, held=None, batch_slots=0: (
                pid,
                batch_slots,
                held is not None,
                door_size(tokens, held) < tokens // 2,  # mostly held already
            ),
        )
        wrap("at_boundary", lambda pid, view, now: (pid,))
        wrap("queue_call", lambda pid, nid, probe, now, **kw: (pid, nid))
        wrap("call_ended", lambda pid, nid, cid, now, usage, outcome="ok": (pid, nid, outcome))
        wrap("tool_started", lambda pid, nid, now: (pid, nid))
        wrap("tool_finished", lambda pid, nid, now, **kw: (pid, nid, kw["outcome"]))
        wrap("finish", lambda pid, now, success=True, last_active=None: (pid, success))
        wrap("cancel", lambda pid, now, reason="user": (pid,))
        wrap("settle", lambda view, now: ())

    def decisions(self) -> list[tuple[Any, ...]]:
        """The log as decisions: how often a carrier settles is its own business, so empty
        settles go, and in a run of tool starts only the wait's last decision counts (the
        simulator starts simultaneous tools before it settles; the live service settles after
        each start, deciding again when a later tool is expected back later)."""
        out: list[tuple[Any, ...]] = []
        run: list[tuple[Any, ...]] = []
        hint: tuple[Any, ...] | None = None
        for entry in [*self.log, ("end",)]:
            if entry == ("settle",):
                continue
            if entry[0] in ("tool_started", "hint") and not (entry[0] == "hint" and not run):
                if entry[0] == "hint":
                    hint = entry
                else:
                    run.append(entry)
                continue
            out += run + ([hint] if hint is not None else [])
            run, hint = [], None
            out.append(entry)
        return out[:-1]


def _action(action: Action) -> tuple[Any, ...]:
    if isinstance(action, CacheHint):
        return ("hint", action.program_id, action.action.value)
    if isinstance(action, StartPrograms):
        return ("start", *action.program_ids)
    if isinstance(action, ProgramEnded):
        return ("ended", action.program_id)
    return (type(action).__name__,)


def _bench() -> tuple[list[tuple[Any, ...]], list[tuple[str, float]]]:
    sim = Simulation(loads_trace(_trace()), COST, SimConfig(policy="cp-cache"))
    advisor = FixedAdvisor()
    sim.driver.advisor = advisor
    recorder = Recorder(sim.driver)
    recorder.install()
    sim.run()
    return recorder.decisions(), advisor.asked


async def _serve(ended: list[str]) -> tuple[list[tuple[Any, ...]], list[tuple[str, float]]]:
    """The script through serve's service; ``ended`` gets the programs it told its runtime
    had ended (``ProgramEnded`` carried out), in order."""
    runtime = SimLiveRuntime(COST, time_scale=0.0, output_tokens=20)
    await runtime.start()
    # the service carries ``ProgramEnded`` out on the runtime
    runtime.program_ended = ended.append  # type: ignore[method-assign,assignment]
    service = ProgramService(runtime, EventHub(), door=DoorSettings(enabled=True))
    service.runtime_ready.set()
    advisor = FixedAdvisor()
    service.driver.advisor = advisor
    recorder = Recorder(service.driver)
    recorder.install()
    tools = service.tools

    async def call(pid: str, node_id: str) -> None:
        # each program its own task, as in the trace (its blocks are keyed by program)
        chat = ChatCall([{"role": "user", "content": pid + "x" * 1200}], 20, program_id=pid)
        chat = ChatCall(chat.messages, 20, program_id=pid, node_id=node_id)
        await (await service.start_call(TENANT, chat)).outcome()

    async def run_tool(pid: str, node_id: str, *, finish: bool = True) -> None:
        name, kind = TOOLS[node_id]
        await tools.ensure_tool_node(TENANT, pid, node_id, ToolSpec(name, ToolKind(kind)))
        await tools.tool_started(pid, node_id)

    try:
        await call("par-1", "llm-1")
        await run_tool("par-1", "tool-2")
        await run_tool("par-1", "tool-3")
        await tools.tool_finished("par-1", "tool-2", "ok")
        await tools.tool_finished("par-1", "tool-3", "ok")
        await call("par-1", "llm-4")
        service.finish_program(TENANT, "par-1", success=True)
        await call("par-2", "llm-1")
        await run_tool("par-2", "tool-3")
        await service.cancel_program(TENANT, "par-2")
        await asyncio.sleep(0)
    finally:
        await service.stop()
        await runtime.stop()
    return recorder.decisions(), advisor.asked


def test_bench_and_serve_ask_the_driver_the_same_questions_and_get_the_same_answers() -> None:
    bench_log, bench_asked = _bench()
    ended: list[str] = []
    serve_log, serve_asked = asyncio.run(_serve(ended))
    assert bench_log == serve_log
    assert bench_log == [
        ("arrive", "par-1", 256, True, False),  # the engine's batch: the door fills it
        ("queue_call", "par-1", "llm-1"),
        ("call_ended", "par-1", "llm-1", "ok"),
        ("tool_started", "par-1", "tool-2"),
        ("tool_started", "par-1", "tool-3"),
        ("hint", "par-1", "keep"),
        ("tool_finished", "par-1", "tool-2", "ok"),
        ("tool_finished", "par-1", "tool-3", "ok"),
        ("at_boundary", "par-1"),
        ("queue_call", "par-1", "llm-4"),
        ("call_ended", "par-1", "llm-4", "ok"),
        ("finish", "par-1", True),
        ("ended", "par-1"),
        ("arrive", "par-2", 256, True, False),  # the engine's batch: the door fills it
        ("queue_call", "par-2", "llm-1"),
        ("call_ended", "par-2", "llm-1", "ok"),
        ("tool_started", "par-2", "tool-3"),
        ("hint", "par-2", "keep"),
        ("cancel", "par-2"),
        ("hint", "par-2", "recompute"),
        ("ended", "par-2"),
    ]
    assert ended == ["par-1", "par-2"]
    # the last decision of each wait was taken on the same facts, to the wall clock's jitter:
    # the driver prices what is left of the tool's wait, and on serve the tool has run a few
    # microseconds of real time by the decision
    bench_facts, serve_facts = dict(bench_asked), dict(serve_asked)
    assert bench_facts.keys() == serve_facts.keys()
    assert all(serve_facts[p] == pytest.approx(bench_facts[p], rel=1e-3) for p in bench_facts)
