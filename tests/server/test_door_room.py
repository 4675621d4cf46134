"""The door's waiting room (``server.live.door.DoorRoom``): the first calls of a program wait
together, and the program leaves the queue only when the last of them gives up."""

from __future__ import annotations

import asyncio

import pytest

from agentconsole.server.live.door import DoorRoom
from agentconsole.server.live.errors import ClientLeft, Unavailable


def test_a_program_leaves_the_queue_only_when_its_last_waiting_call_gives_up() -> None:
    left: list[str] = []

    async def scenario() -> None:
        room = DoorRoom(left.append, wait_s=0.2)
        gone = asyncio.create_task(room.wait("fan-out"))
        stays = asyncio.create_task(room.wait("fan-out"))
        await asyncio.sleep(0.01)
        gone.cancel()  # its client went away: its sibling still waits
        await asyncio.gather(gone, return_exceptions=True)
        assert (left, room.waiting) == ([], 1)
        room.open(["fan-out"])
        await stays  # let in
        first = asyncio.create_task(room.wait("refused"))
        second = asyncio.create_task(room.wait("refused"))
        outcomes = await asyncio.gather(first, second, return_exceptions=True)
        assert all(isinstance(outcome, Unavailable) for outcome in outcomes)
        assert (left, room.waiting) == (["refused"], 0)  # it left once, with its last call

    asyncio.run(scenario())


def test_a_call_whose_client_left_gives_up_its_wait_and_one_let_in_drops_its_watch() -> None:
    left: list[str] = []

    async def scenario() -> None:
        room = DoorRoom(left.append, wait_s=5.0)
        gone = asyncio.Event()
        waiting = asyncio.create_task(room.wait("away", gone.wait))
        await asyncio.sleep(0.01)
        gone.set()  # its client disconnected
        with pytest.raises(ClientLeft):
            await waiting
        assert (left, room.waiting) == (["away"], 0)
        lucky = asyncio.create_task(room.wait("lucky", asyncio.Event().wait))
        await asyncio.sleep(0.01)
        room.open(["lucky"])
        await lucky  # let in: the watch on its client is dropped
        assert left == ["away"]

    asyncio.run(scenario())
