"""Standing operator actions take effect in the order they are audited: a restart replays the
audit log, so a drain whose engine answered slowly must not be recorded after an undrain that
overtook it (the server would come back drained while the engine ran)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from agentconsole.server.live.operator import OperatorDesk, OperatorMemory


class SlowPauseRuntime:
    """As the SGLang runtime: a pause writes the engine's control state at once, then waits
    for the engine to acknowledge it; a resume's acknowledgement comes back at once."""

    def __init__(self) -> None:
        self.paused = False

    async def pause(self) -> None:
        self.paused = True
        await asyncio.sleep(0.05)

    async def resume(self) -> None:
        self.paused = False


def test_a_drain_and_an_undrain_sent_together_are_audited_in_the_order_they_applied() -> None:
    runtime = SlowPauseRuntime()
    service = SimpleNamespace(
        runtime=runtime,
        draining=False,
        controller=SimpleNamespace(programs={}),
        hub=SimpleNamespace(emit=lambda event: None),
    )
    audited: list[tuple[str, Mapping[str, Any]]] = []

    async def audit(
        now: float, actor: str, action: str, target: str, args: Mapping[str, Any], result: str
    ) -> None:
        audited.append((action, args))

    desk = OperatorDesk(service, audit)  # type: ignore[arg-type]

    async def both() -> None:
        drain = asyncio.create_task(desk.drain("op", True))
        await asyncio.sleep(0)  # the drain is in its pause when the undrain arrives
        await asyncio.gather(drain, desk.drain("op", False))

    asyncio.run(both())
    remembered = OperatorMemory.of(audited)
    # what a restart would restore is what is in force now, engine and flag alike
    assert remembered.draining is service.draining is runtime.paused
