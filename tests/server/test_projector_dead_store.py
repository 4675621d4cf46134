"""The projector's sync before a listing, with the store's writer dying: the listing reads the
rows that committed before (``StoreProjector.sync_for_read``), also when the writer dies while
the sync waits for its commit; a sync that must commit (start-up's) still raises."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import EventLog
from agentconsole.server.live.projector import StoreProjector
from agentconsole.server.live.servicemodel import OnlineServiceModel
from agentconsole.server.store import Store, StoreConfig
from agentconsole.server.store.errors import StoreClosedError
from agentconsole.server.store.sqlconn import SqlConnection


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "projector.duckdb", StoreConfig())
    try:
        yield opened
    finally:
        opened.close()


def _projector_of_one_program(store: Store) -> StoreProjector:
    """A projector whose controller holds program ``p``, its rows committed."""
    log = EventLog()
    controller = ProgramController(log, OnlineServiceModel())
    projector = StoreProjector(controller, store.writer)
    controller.open_program("p", "t", 1.0)
    for event in log.events:
        projector.observe(event)
    asyncio.run(projector.sync())
    return projector


def _die_during(projector: StoreProjector, store: Store, sync_for_read: bool) -> None:
    """Run one sync while the writer's main lane is held busy, kill the writer while that
    sync's flush waits behind it, then let the lane go on (to fail what is queued)."""
    busy, release = threading.Event(), threading.Event()

    def hold(_: SqlConnection) -> None:
        busy.set()
        release.wait(10)

    store.writer.call(hold)
    assert busy.wait(10)

    async def sync_while_dying() -> None:
        waiting = asyncio.create_task(
            projector.sync_for_read() if sync_for_read else projector.sync()
        )
        await asyncio.sleep(0.05)  # the sync's flush is queued behind ``hold``
        assert not waiting.done()
        store.writer._lanes[0].abort(RuntimeError("disk gone"))
        release.set()
        await asyncio.wait_for(waiting, 10)

    asyncio.run(sync_while_dying())


def test_a_death_while_the_read_sync_waits_is_read_past(store: Store) -> None:
    projector = _projector_of_one_program(store)
    _die_during(projector, store, sync_for_read=True)  # returns, not raises
    assert store.writer.failure is not None
    asyncio.run(projector.sync_for_read())  # dead already: no flush is even tried
    assert [r.program_id for r in store.repo.list_programs()] == ["p"]


def test_a_sync_that_must_commit_still_raises_on_a_death(store: Store) -> None:
    projector = _projector_of_one_program(store)
    with pytest.raises(StoreClosedError):
        _die_during(projector, store, sync_for_read=False)
