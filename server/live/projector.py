"""Keeps the store's ``programs``, ``nodes`` and ``attempts`` rows in step with the controller.

Subscribed to the hub, it only marks programs and nodes dirty (O(1) per event); a task writes
the current rows of dirty ones every ``interval_s`` (1 s) through the store writer (fire and
forget, group-committed). :meth:`sync` writes at once and waits for the commit, so a listing
read right after a change sees it.
"""

from __future__ import annotations

import asyncio
import time

from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import Event
from agentconsole.server.live.periodic import Periodic
from agentconsole.server.live.views import node_record, program_record
from agentconsole.server.store.records import AttemptRecord
from agentconsole.server.store.writer import StoreWriter


class StoreProjector:
    """See the module docstring."""

    def __init__(
        self, controller: ProgramController, writer: StoreWriter, interval_s: float = 1.0
    ) -> None:
        self.controller = controller
        self.writer = writer
        self.interval_s = interval_s
        self._dirty: dict[str, set[str]] = {}
        self._periodic = Periodic("store-projector", interval_s, self._tick)

    def observe(self, event: Event) -> None:
        """Hub subscriber: remember what changed."""
        if event.program_id:
            nodes = self._dirty.setdefault(event.program_id, set())
            if event.node_id:
                nodes.add(event.node_id)

    def write(self) -> int:
        """Queue the rows of everything dirty at once; returns how many programs."""
        dirty, self._dirty = self._dirty, {}
        for pid, node_ids in dirty.items():
            self._write_program(pid, node_ids, time.time())
        return len(dirty)

    async def write_gradually(self, chunk: int = 32) -> None:
        """As :meth:`write`, yielding to the event loop after every ``chunk`` programs or
        nodes, so a second's worth of changes never stalls calls in flight."""
        dirty, self._dirty = self._dirty, {}
        done = 0
        for pid, node_ids in dirty.items():
            done += 1 + self._write_program(pid, node_ids, time.time())
            if done >= chunk:
                done = 0
                await asyncio.sleep(0)

    def _write_program(self, pid: str, node_ids: set[str], now: float) -> int:
        program = self.controller.programs.get(pid)
        if program is None:
            return 0
        put = self.writer.put
        put(program_record(program, now))
        for nid in node_ids:
            node = program.nodes.get(nid)
            if node is None:
                continue
            put(node_record(program, node, now))
            for attempt in node.attempts:
                put(
                    AttemptRecord(
                        program_id=pid,
                        node_id=nid,
                        attempt=attempt.number,
                        state=attempt.outcome or "running",
                        started_at=attempt.started_at,
                        finished_at=attempt.finished_at,
                    )
                )
        return len(node_ids)

    async def sync(self) -> None:
        """Write everything dirty and wait until it (and all before it) has committed."""
        self.write()
        await asyncio.wrap_future(self.writer.flush())

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        """Stop the task and write what is still dirty (the store commits it on close)."""
        await self._periodic.stop()
        self.write()

    async def _tick(self) -> None:
        await self.write_gradually()
