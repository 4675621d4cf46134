"""A program the door let in gives its share back when its call never reaches the engine,
and one parked at its boundary leaves the line when its caller leaves.

The door counts a started program's predicted working set while it has calls in the engine
and newcomers wait behind it; a call that was let in and then refused on its way to the
engine (the runtime refusing it at submit), or whose caller gave up just as its program was
let in, would otherwise leave its program counted, with no call, until the program idles
out (300 s), and the next program waits behind a share nobody uses.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from agentconsole.scheduler.actions import Action, CacheHint
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.live import intake
from agentconsole.server.live.errors import Unavailable
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.intake import ChatCall
from agentconsole.server.live.service import DoorSettings, ProgramService
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime

#: a door that holds one of these programs at a time (each prompt ~460 private tokens)
BUDGET_TOKENS = 600


def _chat(program_id: str, word: str) -> ChatCall:
    return ChatCall([{"role": "user", "content": f"{word} " * 300}], 8, program_id=program_id)


async def _service() -> tuple[ProgramService, SimLiveRuntime]:
    runtime = SimLiveRuntime(
        preset("H200-141GB", "llama-3.1-8b", 1), time_scale=0.0, output_tokens=8
    )
    await runtime.start()
    door = DoorSettings(enabled=True, budget_tokens=BUDGET_TOKENS)
    service = ProgramService(runtime, EventHub(), door=door)
    service.runtime_ready.set()
    return service, runtime


async def _next_waits(service: ProgramService, program_id: str) -> bool:
    """Whether a new program's first call waits at the door now (its call is cancelled)."""
    call = asyncio.create_task(service.start_call("t", _chat(program_id, "next")))
    await asyncio.sleep(0.2)
    waits = service.driver.door.is_parked(program_id)
    call.cancel()
    return waits


async def _after_the_grace(service: ProgramService) -> None:
    """The driver's sweep a minute on: a program with no call is uncounted by now."""
    await asyncio.sleep(0.05)
    service.settle(service.driver.tick(time.time() + 60))
    await asyncio.sleep(0.05)


def test_a_call_the_runtime_refuses_at_submit_gives_its_programs_share_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> tuple[list[str], int, bool]:
        service, runtime = await _service()
        try:
            with monkeypatch.context() as refusing:
                refusing.setattr(intake, "LiveCall", _refuse)
                with pytest.raises(Unavailable, match="queue full"):
                    await service.start_call("t", _chat("a", "hello"))
            await _after_the_grace(service)
            door = service.driver.door
            return sorted(door._counted), door.used_tokens, await _next_waits(service, "b")
        finally:
            await service.stop()
            await runtime.stop()

    counted, used, next_waits = asyncio.run(scenario())
    assert (counted, used, next_waits) == ([], 0, False)


def _refuse(*args: object, **kwargs: object) -> None:
    raise RuntimeError("queue full")


def test_a_caller_that_gives_up_as_its_program_is_let_in_gives_its_share_back() -> None:
    """``b`` waits behind ``a``; ``a`` ends, the driver starts ``b`` (its gate opens in the
    task that carries out the start) and ``b``'s caller is cancelled in that same turn."""

    async def scenario() -> tuple[bool, list[str], int, bool]:
        service, runtime = await _service()
        try:
            await (await service.start_call("t", _chat("a", "hello"))).outcome()
            waiting = asyncio.create_task(service.start_call("t", _chat("b", "other")))
            await asyncio.sleep(0.2)
            door = service.driver.door
            assert door.is_parked("b")
            service.finish_program("t", "a", success=True)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await _after_the_grace(service)
            started = door.is_started("b")
            return started, sorted(door._counted), door.used_tokens, await _next_waits(service, "c")
        finally:
            await service.stop()
            await runtime.stop()

    started, counted, used, next_waits = asyncio.run(scenario())
    assert started  # it was let in: a retry of it goes on without waiting again
    assert (counted, used, next_waits) == ([], 0, False)


class _ParksEveryBoundary:
    """A driver whose door parks every started program at its call boundary; it records
    the programs whose callers left the door."""

    door_open = True

    def __init__(self) -> None:
        self.left: list[str] = []
        self.door = SimpleNamespace(is_returning=lambda program_id: True)

    def at_boundary(self, program_id: str, view: object, now: float) -> list[Action]:
        return [CacheHint(program_id, CacheAction.OFFLOAD, 0.0)]

    def leave_door(self, program_id: str, now: float) -> list[Action]:
        self.left.append(program_id)
        return []

    def settle(self, view: object, now: float) -> list[Action]:
        return []


def test_a_caller_that_leaves_while_its_parked_context_moves_leaves_the_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A started program parked at its boundary waits in a line ahead of every newcomer. Its
    caller cancelled while the park's actions run (its context offloading), before it waits
    at the door: it must step away from that line (its place kept for the retry) as a caller
    that gives up waiting does, not stay in it holding every newcomer back."""

    async def moving(service: ProgramService, actions: list[Action]) -> None:
        await asyncio.Event().wait()  # the offload takes longer than the caller waits

    async def scenario() -> list[str]:
        service, runtime = await _service()
        driver = _ParksEveryBoundary()
        service.driver = driver  # type: ignore[assignment]
        monkeypatch.setattr(ProgramService, "apply", moving)
        program = service.controller.open_program("p", "t", 0.0)
        program.completed_calls = 1  # a started program at its next call
        try:
            call = asyncio.create_task(service.intake._door(program, {}, None))
            await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            return driver.left
        finally:
            monkeypatch.undo()
            await service.stop()
            await runtime.stop()

    assert asyncio.run(scenario()) == ["p"]
