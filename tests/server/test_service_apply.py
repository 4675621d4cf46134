"""``ProgramService.apply``: the driver's actions run in order, and one that fails (a runtime's
cache hint raising) is logged while the rest still run: the driver's books have moved already,
so a skipped start would leave a call waiting at the door for nothing."""

from __future__ import annotations

import asyncio

import pytest

from agentconsole.scheduler.actions import Action, CacheHint, ProgramEnded, StartPrograms
from agentconsole.scheduler.driver import SettleFailed
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.service import ProgramService
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime


class _HintsFail(SimLiveRuntime):
    async def cache_hint(self, program_id: str, action: CacheAction, retain_s: float) -> None:
        raise OSError("the control file could not be written")


def test_a_failing_action_does_not_keep_the_next_ones_from_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[bool, bool]:
        service = ProgramService(_HintsFail(preset("H200-141GB", "llama-3.1-8b", 1)), EventHub())
        started = asyncio.create_task(service.door.wait("started"))
        ended = asyncio.create_task(service.door.wait("ended"))
        await asyncio.sleep(0)
        await service.apply(
            [
                CacheHint("other", CacheAction.OFFLOAD, 0.0),
                StartPrograms(("started",)),
                CacheHint("other", CacheAction.RECOMPUTE, 0.0),
                ProgramEnded("ended"),
            ]
        )
        await asyncio.wait_for(asyncio.gather(started, ended), 1.0)
        return started.done(), ended.done()

    assert asyncio.run(scenario()) == (True, True)
    assert caplog.text.count("driver action CacheHint failed") == 2


class _DriverFails:
    """A driver whose decision for program ``broken`` failed after it decided ``ended``'s end."""

    def settle(self, view: object, now: float) -> list[Action]:
        raise SettleFailed("broken", [ProgramEnded("ended")], OSError("placement unreadable"))


def test_a_failed_decision_loses_neither_what_was_decided_nor_the_callers_actions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[bool, bool]:
        service = ProgramService(
            SimLiveRuntime(preset("H200-141GB", "llama-3.1-8b", 1)), EventHub()
        )
        service.driver = _DriverFails()  # type: ignore[assignment]
        started = asyncio.create_task(service.door.wait("started"))
        ended = asyncio.create_task(service.door.wait("ended"))
        await asyncio.sleep(0)
        await service.settled([StartPrograms(("started",))])
        await asyncio.wait_for(asyncio.gather(started, ended), 1.0)
        return started.done(), ended.done()

    assert asyncio.run(scenario()) == (True, True)
    assert "deciding for program broken failed" in caplog.text
