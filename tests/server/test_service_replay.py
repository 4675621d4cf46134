"""The real-engine bench's "agentconsole" arm is serve's own ProgramService: a replayed trace
becomes the same programs, nodes and tool waits an agent calling ``serve`` would make."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from agentconsole.sample_traces.codec import loads_trace
from agentconsole.scheduler.program import NodeKind, ProgramState
from agentconsole.scheduler.runtime import MemoryView
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.live.enginequeue import READ_EVERY_S, EngineQueues
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.replay import ReplayedProgram, ServiceReplay
from agentconsole.server.live.service import DoorSettings, ProgramService
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from agentconsole.server.runtime.sim.live_text import CHARS_PER_TOKEN

COST = preset("H200-141GB", "llama-3.1-8b", 1)


class Letters:
    """Segment text the simulated tokenizer counts as exactly ``tokens``."""

    def text(self, key: str, tokens: int) -> str:
        del key
        return "a" * (tokens * CHARS_PER_TOKEN)


def _program(pid: str, *, cancel_at_s: float | None = None) -> dict[str, Any]:
    tool = {
        "id": "search",
        "kind": "tool",
        "parents": ["plan"],
        "tool": "web_search",
        "tool_kind": "search",
        "timeout_s": 60.0,
        "result_tokens": 40,
        "attempts": [
            {"latency_s": 0.01, "outcome": "fail"},
            {"latency_s": 0.02 if cancel_at_s is None else 5.0, "outcome": "ok"},
        ],
    }
    return {
        "id": pid,
        "tenant": "acme",
        "workload": "replay",
        "shape": "replay",
        "arrival_s": 0.0,
        **({"cancel_at_s": cancel_at_s} if cancel_at_s is not None else {}),
        "nodes": [
            {"id": "plan", "kind": "llm", "parents": [], "prompt_tokens": 200, "output_tokens": 8},
            tool,
            {
                "id": "answer",
                "kind": "llm",
                "parents": ["search"],
                "prompt_tokens": 60,
                "output_tokens": 8,
            },
        ],
    }


async def _replay() -> tuple[ProgramService, list[ReplayedProgram]]:
    runtime = SimLiveRuntime(COST, time_scale=0.0, output_tokens=8)
    await runtime.start()
    service = ProgramService(runtime, EventHub(), door=DoorSettings(enabled=True))
    service.runtime_ready.set()
    trace = loads_trace(
        "\n".join(json.dumps(p) for p in (_program("done"), _program("gone", cancel_at_s=0.5)))
    )
    try:
        return service, await ServiceReplay(service, trace, Letters()).run()
    finally:
        await service.stop()
        await runtime.stop()


def test_a_replayed_trace_runs_through_the_service_as_an_agent_would() -> None:
    service, ended = asyncio.run(_replay())
    done, gone = ended
    assert (done.success, gone.success) == (True, False)
    assert (done.cancelled, gone.cancelled) == (False, True)  # the trace's cancel, no failure
    assert done.prompt_tokens > 0
    assert done.e2e_s > 0
    programs = service.controller.programs
    assert programs["done"].state is ProgramState.FINISHED
    assert programs["gone"].state is ProgramState.CANCELLED
    nodes = programs["done"].nodes
    kinds = {nid: n.kind for nid, n in nodes.items()}
    # each tool attempt is a tool node the agent reported; the calls are the trace's
    assert kinds == {
        "plan": NodeKind.LLM,
        "search": NodeKind.TOOL,
        "search#1": NodeKind.TOOL,
        "answer": NodeKind.LLM,
    }
    assert nodes["answer"].output_tokens == 8


def test_serve_prices_the_drain_by_the_batch_running_while_a_backlog_waits() -> None:
    """Serve's intake tells the driver what the engine runs while its queue is a backlog (as
    long as its batch: the drain on the ticket, ``scheduler/backlog.py``), and nothing while a
    shorter queue or none waits."""

    async def run(queued: int) -> list[tuple[int, float]]:
        runtime = SimLiveRuntime(COST, time_scale=0.0, output_tokens=8)
        await runtime.start()
        memory = runtime.memory
        runtime.memory = lambda program_id=None: replace(  # type: ignore[method-assign]
            memory(program_id), queued_calls=queued, running_calls=3
        )
        service = ProgramService(runtime, EventHub(), door=DoorSettings(enabled=False))
        service.runtime_ready.set()
        told: list[tuple[int, float]] = []
        queue_call = service.driver.queue_call

        def recorded(*args: Any, **kwargs: Any) -> CallTicket:
            ticket = queue_call(*args, **kwargs)
            told.append((kwargs["queued_behind"], ticket.drain_s))
            return ticket

        service.driver.queue_call = recorded  # type: ignore[method-assign]
        trace = loads_trace(json.dumps(_program("p")))
        try:
            await ServiceReplay(service, trace, Letters()).run()
        finally:
            await service.stop()
            await runtime.stop()
        return told

    busy, short, idle = asyncio.run(run(3)), asyncio.run(run(2)), asyncio.run(run(0))
    assert [behind for behind, _ in busy] == [3, 3]  # plan and answer
    assert busy[-1][1] > 0  # the answer: a call has ended, so a latency is known
    assert short == idle == [(0, 0.0), (0, 0.0)]


def test_the_engines_queues_are_read_at_most_every_few_ms_and_sum_every_models_batch() -> None:
    """``EngineQueues``: the batch that prices the drain is every model's running calls, told
    only while the chosen model's queue is a backlog; a runtime's memory is read again only
    after ``READ_EVERY_S`` (on SGLang a read parses the plugin's status file)."""

    class Engine:
        def __init__(self, queued: int, running: int) -> None:
            self.view = MemoryView(0, 0, queued_calls=queued, running_calls=running)
            self.reads = 0

        def memory(self, program_id: str | None = None) -> MemoryView:
            del program_id  # one engine: the same for every program
            self.reads += 1
            return self.view

    now = [0.0]
    big, small = Engine(3, 3), Engine(0, 1)
    queues = EngineQueues({"big": big, "small": small}, clock=lambda: now[0])  # type: ignore[dict-item]
    assert queues.behind("big") == 4  # a backlog on big: big's 3 and small's 1 run
    assert queues.behind("small") == 0  # nothing waits on small
    big.view = MemoryView(0, 0, queued_calls=0, running_calls=3)
    assert queues.behind("big") == 4  # read less than READ_EVERY_S ago: not read again
    assert big.reads == 1
    now[0] += READ_EVERY_S
    assert queues.behind("big") == 0
    assert big.reads == 2
