"""``Runtime.memory(program_id)`` beyond one engine: the fleet answers a program from its
latest model's engine (every model's summed for none, or a program that ran nowhere yet), and
the drain batch on a call's ticket (``EngineQueues.behind``) reads the queue of the engine the
call's program runs on, as the simulator reads the replica a call is placed on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentconsole.scheduler.models import ServedModel
from agentconsole.scheduler.runtime import GenerationRequest, MemoryView
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.live.enginequeue import READ_EVERY_S, EngineQueues
from agentconsole.server.runtime.fleet.build import build_runtime
from agentconsole.server.runtime.fleet.merge import merged_memory
from agentconsole.server.runtime.fleet.runtime import FleetRuntime
from agentconsole.server.runtime.registry import RuntimeOptions
from tests.server.api.harness import LiveServer, chat_body, make_config

MODELS = (
    ServedModel("big", source="llama-3.1-70b", tier=2, tp=4),
    ServedModel("small", source="llama-3.1-8b", tier=1),
)


def _request(call_id: str, model: str) -> GenerationRequest:
    pid, node, attempt = call_id.split("/")
    ticket = CallTicket(call_id, pid, node, "t", time.time(), int(attempt))
    prompt = f"{pid}: a context of its own " * 20
    return GenerationRequest(
        ticket, prompt, 8, cache_namespace="t", forced_output_tokens=8, model=model
    )


def test_the_fleet_answers_a_program_from_its_latest_models_engine() -> None:
    async def scenario() -> None:
        fleet = build_runtime("sim", RuntimeOptions(extra={"time_scale": 0.0}), MODELS)
        assert isinstance(fleet, FleetRuntime)
        await fleet.start()
        big, small = fleet.member("big"), fleet.member("small")
        await fleet.submit(_request("p1/n1/1", "small")).result()
        await fleet.submit(_request("p2/n1/1", "small")).result()
        await fleet.submit(_request("p2/n2/1", "big")).result()  # p2 moved to big
        whole = fleet.memory()
        assert whole == merged_memory({"big": big.memory(), "small": small.memory()})
        assert fleet.memory("p1") == small.memory("p1")
        assert fleet.memory("p2") == big.memory("p2")
        assert fleet.memory("p1").hbm_capacity_tokens == small.memory().hbm_capacity_tokens
        assert fleet.memory("p1").hbm_capacity_tokens < whole.hbm_capacity_tokens
        assert fleet.memory("nobody") == whole  # ran nowhere yet: every model's
        await fleet.stop()

    asyncio.run(scenario())


class _TwoRanks:
    """A runtime of two data-parallel ranks: ``on-idle``'s runs 1 call and queues none,
    ``on-busy``'s runs 4 and queues 6 (the whole runtime: both summed)."""

    name = "two-ranks"

    def __init__(self) -> None:
        self.ranks = {
            "on-idle": MemoryView(0, 0, queued_calls=0, running_calls=1),
            "on-busy": MemoryView(0, 0, queued_calls=6, running_calls=4),
        }
        self.reads: list[str | None] = []

    def memory(self, program_id: str | None = None) -> MemoryView:
        self.reads.append(program_id)
        found = self.ranks.get(program_id) if program_id is not None else None
        return found or MemoryView(0, 0, queued_calls=6, running_calls=5, engines=2)


def test_the_drain_batch_reads_the_queue_of_the_programs_rank() -> None:
    now = [0.0]
    engine, other = _TwoRanks(), _TwoRanks()  # of ``other`` only its batch is read
    queues = EngineQueues({"m": engine, "n": other}, clock=lambda: now[0])  # type: ignore[dict-item]
    # every model's running calls count; the queue is the program's rank's
    assert queues.behind("m", "on-busy") == 10  # 6 wait behind 4: a backlog; 5 + 5 run
    assert queues.behind("m", "on-idle") == 0  # nothing waits on its rank
    assert queues.behind("m", "new") == 10  # ran nowhere yet: the whole runtime's queue
    assert queues.behind("m") == 10
    engine.reads.clear()
    assert queues.behind("m", "on-idle") == 0  # read less than READ_EVERY_S ago
    assert engine.reads == []
    now[0] += READ_EVERY_S
    engine.ranks["on-idle"] = MemoryView(0, 0, queued_calls=3, running_calls=1)
    assert queues.behind("m", "on-idle") == 10
    assert engine.reads == [None, "on-idle"]


def test_the_views_of_programs_that_asked_long_ago_are_not_kept() -> None:
    """One view per program that asked within ``READ_EVERY_S``: a server that sees a million
    programs keeps a bounded few."""
    now = [0.0]
    queues = EngineQueues({"m": _TwoRanks()}, clock=lambda: now[0])  # type: ignore[dict-item]
    for n in range(2_000):
        now[0] += READ_EVERY_S / 4
        queues.behind("m", f"p{n}")
    assert len(queues._read) <= 300


def test_one_engine_is_read_once_whatever_the_programs_that_ask() -> None:
    """Where the runtime is one engine every program's view is the whole runtime's: a burst of
    calls from a thousand programs reads it once (a read per program cost the API its
    overhead budget on SGLang, where a read parses the plugin's status)."""
    now = [0.0]
    engine = _TwoRanks()
    engine.ranks.clear()
    single = MemoryView(0, 0, queued_calls=6, running_calls=5)  # engines=1

    def memory(program_id: str | None = None) -> MemoryView:
        engine.reads.append(program_id)
        return single

    engine.memory = memory  # type: ignore[method-assign]
    queues = EngineQueues({"m": engine}, clock=lambda: now[0])  # type: ignore[dict-item]
    for n in range(1_000):
        queues.behind("m", f"p{n}")
    assert engine.reads == [None]


def test_views_asked_at_once_by_many_programs_stay_bounded() -> None:
    queues = EngineQueues({"m": _TwoRanks()}, clock=lambda: 0.0)  # type: ignore[dict-item]
    for n in range(2_000):
        queues.behind("m", f"p{n}")  # all within READ_EVERY_S: none is stale
    assert len(queues._read) <= 256


def test_a_call_s_ticket_asks_the_queue_of_its_program_s_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serve's intake names the call's program when it asks for the drain batch."""
    asked: list[tuple[str, str | None]] = []
    behind = EngineQueues.behind

    def recording(self: EngineQueues, model: str, program_id: str | None = None) -> int:
        asked.append((model, program_id))
        return behind(self, model, program_id)

    monkeypatch.setattr(EngineQueues, "behind", recording)
    with LiveServer(make_config(tmp_path / "behind.duckdb")) as server, server.client() as c:
        body = chat_body("hi", max_tokens=4, agentconsole={"program_id": "p-behind"})
        assert c.post("/v1/chat/completions", json=body).status_code == 200
    assert [pid for _, pid in asked] == ["p-behind"]
