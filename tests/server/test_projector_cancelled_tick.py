"""A projector tick cancelled midway (``Periodic.stop`` at shutdown) leaves what it had not
written dirty and writes no sync mark for it: the stop's last write then writes every program
with the mark, and a restart rebuilds them all (before, the tick's mark claimed the programs
it never reached, and a restart lost them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import EventLog
from agentconsole.server.live.projector import StoreProjector
from agentconsole.server.live.reopen import programs_to_restore
from agentconsole.server.live.servicemodel import OnlineServiceModel
from agentconsole.server.store import Store, StoreConfig
from agentconsole.server.store.syncmarks import PROJECTOR

PROGRAMS = 20


def test_a_cancelled_tick_loses_no_program(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb", StoreConfig()) as store:
        log = EventLog()
        controller = ProgramController(log, OnlineServiceModel())
        seq = [0]
        projector = StoreProjector(controller, store.writer, last_seq=lambda: seq[0])
        for i in range(PROGRAMS):
            controller.open_program(f"p{i}", "t", 1.0)
        for event in log.events:
            seq[0] += 1
            projector.observe(event)

        async def stop_midway() -> None:
            tick = asyncio.create_task(projector.write_gradually(chunk=2))
            for _ in range(2):  # the tick builds two programs' rows at a time, then yields
                await asyncio.sleep(0)
            assert not tick.done()
            tick.cancel()  # as the projector's stop cancels its periodic task
            await asyncio.gather(tick, return_exceptions=True)
            await projector.stop()  # its last write
            await asyncio.wrap_future(store.writer.flush())

        asyncio.run(stop_midway())
        assert store.repo.sync_mark(PROJECTOR) == seq[0]
        assert len(store.repo.list_programs()) == PROGRAMS
        assert len(programs_to_restore(store.repo)) == PROGRAMS
