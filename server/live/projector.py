"""Keeps the store's ``programs``, ``nodes`` and ``attempts`` rows in step with the controller.

Subscribed to the hub, it only marks programs and nodes dirty (O(1) per event); a task writes
the current rows of dirty ones every ``interval_s`` (1 s) through the store writer (fire and
forget, group-committed). :meth:`sync` writes at once and waits for the commit, so a listing
read right after a change sees it (:meth:`sync_for_read`: unless the writer died, when the
listing reads what committed before).

Marks, so a crash loses no committed event's effect: each row carries ``synced_seq`` in its
data (the hub's last ``seq`` when it was built: every earlier event is in it), and each batch
ends with the projector's sync mark (``store/syncmarks.py``), the hub's last ``seq`` when the
batch began. A restart rebuilds from the rows and replays the events past the mark
(``eventtail.py``), each onto the rows that do not reflect it yet.

Tokens a call streams are no event until it ends, so a crash mid-stream would lose them (the
restart closes the call as interrupted and would charge nothing: free tokens, a refunded
quota). Given the calls in flight (:meth:`StoreProjector.follow_streams`), each write also
marks the node of every call that streamed more since its last row dirty, and the node's row
carries what its open attempt has streamed so far (``eventtail.STREAMED_ATTEMPT`` and
``STREAMED_TOKENS``), which the restart charges (``reopen.py``). No event, and at most one
row per streaming call per ``interval_s``: the charge lags what was delivered by at most the
tokens one call streams in an interval (plus the store's commit delay).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import Event
from agentconsole.scheduler.program import Program
from agentconsole.server.live.eventtail import STREAMED_ATTEMPT, STREAMED_TOKENS
from agentconsole.server.live.insertionbook import InsertionBook
from agentconsole.server.live.periodic import Periodic
from agentconsole.server.live.views import node_record, program_record
from agentconsole.server.store.errors import StoreClosedError
from agentconsole.server.store.records import AttemptRecord, ProgramRecord, Record
from agentconsole.server.store.syncmarks import PROJECTOR, SyncMarkRecord
from agentconsole.server.store.writer import StoreWriter


@dataclass(frozen=True, slots=True)
class Streamed:
    """What one call in flight has streamed so far: the tokens its attempt will be charged
    (delivered and ghost) if it ends now."""

    program_id: str
    node_id: str
    attempt: int
    tokens: int


#: the calls in flight now, as :class:`Streamed` (the service's, wired at start-up)
StreamSource = Callable[[], Iterable[Streamed]]


class StoreProjector:
    """See the module docstring."""

    def __init__(
        self,
        controller: ProgramController,
        writer: StoreWriter,
        interval_s: float = 1.0,
        *,
        last_seq: Callable[[], int] = lambda: 0,
        insertions: InsertionBook | None = None,
        idle_of: Callable[[str], float | None] = lambda program_id: None,
    ) -> None:
        self.controller = controller
        self.writer = writer
        #: a program's critical path's idle seconds as the live metrics count them (None:
        #: not followed), written into its row (``views.summary_json``)
        self.idle_of = idle_of
        #: the hub's newest ``seq`` (the marks the rows carry)
        self.last_seq = last_seq
        #: each program's mid-prompt insertions, written into its rows (``insertionbook.py``)
        self.insertions = insertions
        self.interval_s = interval_s
        self._dirty: dict[str, set[str]] = {}
        #: what a write in progress took of ``_dirty`` (``write_gradually`` yields midway)
        self._writing: dict[str, set[str]] = {}
        #: programs whose last rows ``write_program`` queued during that write: its rows of
        #: them, built earlier, must not follow the last ones
        self._written_last: set[str] = set()
        self._periodic = Periodic("store-projector", interval_s, self._tick)
        self._streams: StreamSource = lambda: ()
        #: (program, node) -> (attempt, tokens) of each call in flight, as of the last write:
        #: what its node's rows carry
        self._streamed: dict[tuple[str, str], tuple[int, int]] = {}

    def follow_streams(self, streams: StreamSource) -> None:
        """Record what the calls ``streams`` names have streamed in their nodes' rows (the
        module docstring says why)."""
        self._streams = streams

    def _note_streams(self) -> None:
        """Take the calls in flight now, and mark the node of each that streamed more since
        its row was last written dirty (a call that streams nothing new costs no row)."""
        before, now = self._streamed, {}
        for call in self._streams():
            if call.tokens <= 0:  # nothing to charge yet: no row for it
                continue
            key = (call.program_id, call.node_id)
            now[key] = (call.attempt, call.tokens)
            if before.get(key) != now[key]:
                self._dirty.setdefault(call.program_id, set()).add(call.node_id)
        self._streamed = now

    def observe(self, event: Event) -> None:
        """Hub subscriber: remember what changed."""
        if event.program_id:
            nodes = self._dirty.setdefault(event.program_id, set())
            if event.node_id:
                nodes.add(event.node_id)

    def mark_all(self) -> None:
        """Mark every program in memory and all its nodes dirty (after a restart's rebuild,
        so the next write gives each row a mark of this run)."""
        for pid, program in self.controller.programs.items():
            self._dirty.setdefault(pid, set()).update(program.nodes)

    def write(self) -> int:
        """Queue the rows of everything dirty at once; returns how many programs."""
        mark = self.last_seq()
        self._note_streams()
        dirty, self._dirty = self._dirty, {}
        rows: list[Record] = []
        for pid, node_ids in dirty.items():
            program = self.controller.programs.get(pid)
            if program is not None:
                now = time.time()
                rows.append(self._program_row(program, now))
                for nid in node_ids:
                    self._node_rows(program, nid, now, rows)
        self._put(rows, mark)
        return len(dirty)

    async def write_gradually(self, chunk: int = 8) -> None:
        """As :meth:`write`, but the rows are built ``chunk`` programs or nodes at a time,
        yielding to the event loop in between (a program's hundred calls of the last second
        took ~3 ms to build: the tail of the calls in flight), and queued together at the end,
        so the writer commits them in one batch (each batch of upserts scans the tables; rows
        queued a few at a time made twice as many batches and doubled the writer's CPU)."""
        mark = self.last_seq()
        self._note_streams()
        dirty = self._writing = self._dirty
        self._dirty = {}
        rows: list[Record] = []
        done = 0
        try:
            for pid, node_ids in list(dirty.items()):
                program = self.controller.programs.get(pid)
                if program is None or pid not in dirty:  # written by ``write_program``
                    continue
                for nid in ("", *node_ids):  # "": the program's own row, first
                    if done >= chunk:
                        done = 0
                        await asyncio.sleep(0)
                    if nid:
                        done += self._node_rows(program, nid, time.time(), rows)
                    else:
                        rows.append(self._program_row(program, time.time()))
                        done += 1
        except BaseException:
            # stopped midway (a shutdown cancels the tick): nothing of it is queued and what
            # it took stays dirty, for the next write to mark. Its rows with this mark would
            # claim the programs it never reached, which a restart would then not rebuild
            self._writing, self._written_last = {}, set()
            for pid, node_ids in dirty.items():
                self._dirty.setdefault(pid, set()).update(node_ids)
            raise
        self._writing = {}
        if self._written_last:
            rows = [r for r in rows if getattr(r, "program_id", "") not in self._written_last]
            self._written_last = set()
        self._put(rows, mark)

    def write_program(self, program_id: str) -> None:
        """Queue the current rows of ``program_id`` and whatever is dirty of it, now, without
        a sync mark (each row carries its own): its last rows before it leaves memory. A
        later write finds it gone and skips it, so a program forgotten sooner than the next
        write (``limits.retain_finished_s`` under ``store_sync_s``) kept a row that said it
        was running."""
        program = self.controller.programs.get(program_id)
        writing = program_id in self._writing
        node_ids = self._dirty.pop(program_id, set()) | self._writing.pop(program_id, set())
        if writing:
            self._written_last.add(program_id)
        if program is None:
            return
        now = time.time()
        rows: list[Record] = [self._program_row(program, now)]
        for nid in node_ids:
            self._node_rows(program, nid, now, rows)
        for row in rows:
            self.writer.put(row)

    def _program_row(self, program: Program, now: float) -> ProgramRecord:
        idle = self.idle_of(program.program_id)
        return program_record(program, now, self.insertions, self.last_seq(), idle)

    def _node_rows(self, program: Program, nid: str, now: float, rows: list[Record]) -> int:
        """Add the rows of one node and its attempts to ``rows``; 1 if it exists (else 0)."""
        node = program.nodes.get(nid)
        if node is None:
            return 0
        row = node_record(program, node, now, self.insertions, self.last_seq())
        streamed = self._streamed.get((program.program_id, nid))
        if streamed is not None:  # its call streams: what a crash now must still charge
            number, tokens = streamed
            row = replace(row, data={**row.data, STREAMED_ATTEMPT: number, STREAMED_TOKENS: tokens})
        rows.append(row)
        for attempt in node.attempts:
            rows.append(
                AttemptRecord(
                    program_id=program.program_id,
                    node_id=nid,
                    attempt=attempt.number,
                    state=attempt.outcome or "running",
                    started_at=attempt.started_at,
                    finished_at=attempt.finished_at,
                )
            )
        return 1

    def _put(self, rows: list[Record], mark: int) -> None:
        """Queue ``rows`` then the sync mark: the lane commits in order, so a committed mark
        means committed rows."""
        if not rows:
            return  # nothing changed, so nothing past the last mark needs replaying
        put = self.writer.put
        for row in rows:
            put(row)
        put(SyncMarkRecord(PROJECTOR, mark))

    async def sync(self) -> None:
        """Write everything dirty and wait until it (and all before it) has committed."""
        self.write()
        await asyncio.wrap_future(self.writer.flush())

    async def sync_for_read(self) -> None:
        """:meth:`sync` before a read of the rows, unless the store's writer has died: nothing
        more can commit then, so the read answers from the rows that did (shown with their
        live values) instead of failing. A dead store refuses writes, not reads; a death that
        races the flush is read past the same way. A writer merely closed (shutting down)
        still raises :class:`StoreClosedError`, as :meth:`sync` does."""
        if self.writer.failure is not None:
            return
        try:
            await self.sync()
        except StoreClosedError:
            if self.writer.failure is None:
                raise

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        """Stop the task and write what is still dirty (the store commits it on close)."""
        await self._periodic.stop()
        self.write()

    async def _tick(self) -> None:
        await self.write_gradually()
