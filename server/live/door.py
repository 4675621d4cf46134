"""The program door's waiting room in ``serve``: where a new program's first call waits while
the program driver keeps it parked.

The counting is ``scheduler.driver.ProgramDriver`` (``ProgramDoor`` underneath), the same
object the simulator drives; this module only holds the asyncio side: a call of a parked
program waits on an event the driver's :class:`~agentconsole.scheduler.actions.StartPrograms`
sets (the calls of a fan-out wait together), and one that waits longer than ``wait_s`` gets
503 with ``Retry-After`` and takes its program out of the queue (``on_leave``), its place in
line kept for the client's retry (``ProgramDoor.leave``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from agentconsole.server.live.errors import ClientLeft, Unavailable

#: resolves when the caller's client disconnects (the HTTP layer's watch on its connection)
ClientGone = Callable[[], Awaitable[object]]


@dataclass(slots=True)
class _Gate:
    """One program's waiting calls (a fan-out's first calls wait together)."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: int = 0


class DoorRoom:
    """Parked programs' first calls, waiting to be let in."""

    def __init__(self, on_leave: Callable[[str], None], *, wait_s: float = 120.0) -> None:
        self.on_leave = on_leave
        self.wait_s = wait_s
        self._waiting: dict[str, _Gate] = {}

    async def wait(self, program_id: str, gone: ClientGone | None = None) -> None:
        """Wait until ``program_id`` is let in; :class:`Unavailable` after ``wait_s``,
        :class:`ClientLeft` as soon as ``gone`` resolves (its client disconnected). When its
        last waiting call gives up (timed out, cancelled, its client gone), the program leaves
        the queue; a call of it still waiting keeps it there. One that gives up as its
        program is let in (the driver started it, the gate not yet open, or open and the call
        cancelled before it went on) tells ``on_leave`` too: no call of it goes on, so its
        program must not keep a share of the door for a call that never comes."""
        gate = self._waiting.setdefault(program_id, _Gate())
        gate.waiters += 1
        try:
            async with asyncio.timeout(self.wait_s):
                if gone is None:
                    await gate.opened.wait()
                elif not await first_done(gate.opened.wait(), gone()):
                    raise ClientLeft(f"the client left while program {program_id!r} waited")
        except (TimeoutError, asyncio.CancelledError, ClientLeft) as error:
            if gate.opened.is_set() and not isinstance(error, asyncio.CancelledError):
                return  # let in as it gave up (the same turn of the loop): it goes on
            gate.waiters -= 1
            # no other call of it waits: the program leaves the queue (or, let in, goes on
            # with no call; the driver tells which)
            if not gate.waiters:
                if not gate.opened.is_set():
                    del self._waiting[program_id]  # an opened gate is the only one removed
                self.on_leave(program_id)
            if isinstance(error, TimeoutError):
                raise Unavailable(
                    f"program {program_id!r} waited {self.wait_s:.0f} s at the admission door: "
                    "the running programs fill the KV memory; a retry with this program id "
                    "keeps its place in line",
                    headers={"Retry-After": "10"},
                ) from None
            raise

    def open(self, program_ids: Iterable[str]) -> None:
        """Let these programs in (their waiting calls go on)."""
        for program_id in program_ids:
            gate = self._waiting.pop(program_id, None)
            if gate is not None:
                gate.opened.set()

    def open_all(self) -> None:
        """Let every waiting program in (the door was switched off, or the server closes)."""
        self.open(list(self._waiting))

    @property
    def waiting(self) -> int:
        """Programs whose calls wait at the door."""
        return len(self._waiting)


async def first_done(wanted: Awaitable[object], other: Awaitable[object]) -> bool:
    """Await both until one is done, then cancel the other; True if ``wanted`` was done (the
    race of a wait against its client's disconnect, here and in ``api/callflow.py``)."""
    mine, theirs = asyncio.ensure_future(wanted), asyncio.ensure_future(other)
    try:
        await asyncio.wait({mine, theirs}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (mine, theirs):
            task.cancel()
        # waits for both to finish without raising their errors; a cancel of this task
        # itself still passes on
        await asyncio.wait({mine, theirs})
    return mine.done() and not mine.cancelled()
