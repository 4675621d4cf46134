"""The store's writer: two group-committing lanes behind one producer interface.

Producers never touch DuckDB. They enqueue events (:meth:`StoreWriter.emit`, fire and forget,
the ``EventSink`` protocol), acknowledged events (:meth:`StoreWriter.append`), records and ops.
Events go to the *event lane*, which writes the event log file; everything else goes to the
*main lane*, which writes the main file. Each lane is one thread owning one connection
(:mod:`lane`), so a checkpoint of the event log never stalls an acknowledged write of the
main file (:mod:`event_log` says why that matters).

A fatal error in either lane stops both; while either holds a batch the storage refused
(:mod:`lane`), neither checkpoints. Ordering holds within a lane, not across them: an
event and a record queued one after the other may commit in either order. Nothing reads them
as a pair; :meth:`flush` waits for both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import TypeVar

from agentconsole.scheduler.events import Event
from agentconsole.server.store.config import StoreConfig
from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.event_log import EVENT_LOG, EVENTS
from agentconsole.server.store.lane import WriterLane, settle
from agentconsole.server.store.ops import BarrierOp, CallOp, Op
from agentconsole.server.store.records import NUMBERED_SPECS, Record
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.stats import WriterStats

T = TypeVar("T")


def _all_of(futures: list[Future[None]]) -> Future[None]:
    """A future that resolves once every one of ``futures`` has, failing with the first error."""
    combined: Future[None] = Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def done(future: Future[None]) -> None:
        error = future.exception()
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if error is not None:
            settle(combined, None, error)
        elif last:
            settle(combined, None)

    for future in futures:
        future.add_done_callback(done)
    return combined


class StoreWriter:
    """Routes writes to the main lane (``con``) and the event lane (``event_con``).

    Both connections belong to the lanes from :meth:`start` until :meth:`stop` returns.
    """

    def __init__(
        self,
        con: SqlConnection,
        event_con: SqlConnection,
        config: StoreConfig,
    ) -> None:
        crash = CrashPoints.from_env()
        numbered = {
            spec.table: (spec.table, spec.seq_column) for spec in NUMBERED_SPECS if spec.seq_column
        }
        self._main = WriterLane(
            "store-writer", con, config, crash, numbered, "", self._died, self._holding
        )
        self._events = WriterLane(
            "store-event-writer",
            event_con,
            replace(config, linger_s=config.event_linger_s),
            crash,
            {"events": (EVENTS, "seq")},
            EVENT_LOG,
            self._died,
            self._holding,
        )
        self._lanes = (self._main, self._events)

    def _died(self, error: BaseException) -> None:
        # A fatal error invalidates the whole DuckDB instance, so the other lane stops too.
        for lane in self._lanes:
            lane.abort(error)

    def _holding(self) -> bool:
        # Both files share a disk: while one lane's commits are refused (full, read-only), a
        # checkpoint of the other would fail too, and a failed checkpoint invalidates the
        # whole instance, the held batch with it.
        return any(lane.holding for lane in self._lanes)

    # ----------------------------------------------------------------- producer side
    def start(self) -> None:
        """Start both lanes. From here on only their threads use the connections."""
        for lane in self._lanes:
            lane.start()

    def emit(self, event: Event) -> None:
        """Queue ``event`` without waiting (``EventSink``). Never blocks, never raises.

        Dropped (and counted in ``stats.dropped``) when the event queue is over ``max_queue``
        or the writer is closed or dead: the hot path must not stall on the store.
        """
        self._events.offer(event, bounded=True)

    def append(self, event: Event) -> Future[int]:
        """Queue ``event``; the future resolves to its ``seq`` once its batch has committed.

        Raises :class:`StoreClosedError` if the writer is closed or dead. Await it from
        asyncio with ``asyncio.wrap_future``.
        """
        future: Future[int] = Future()
        self._events.submit((event, future))
        return future

    def put(self, record: Record) -> None:
        """Queue an upsert/append of ``record`` without waiting (dropped when closed)."""
        self._main.offer(record, bounded=False)

    def put_durable(self, record: Record) -> Future[None]:
        """Queue ``record``; the future resolves once it has committed."""
        future: Future[None] = Future()
        self._main.submit((record, future))
        return future

    def submit(self, op: Op[T]) -> Future[T]:
        """Queue ``op`` on the main lane; its future resolves with ``op.apply``'s value after
        commit."""
        self._main.submit(op)
        return op.future

    def call(self, fn: Callable[[SqlConnection], T]) -> Future[T]:
        """Run ``fn(con)`` in the main lane's thread, inside a batch transaction. Keep it
        short: every producer of that lane waits for it."""
        return self.submit(CallOp(fn))

    def flush(self, *, events: bool = True) -> Future[None]:
        """A future that resolves once everything queued before this call has committed (on
        the main lane only, without ``events``). Raises :class:`StoreClosedError` if closed."""
        barriers: list[Future[None]] = []
        for lane in self._lanes if events else (self._main,):
            op = BarrierOp()
            lane.submit(op)
            barriers.append(op.future)
        return _all_of(barriers)

    # ----------------------------------------------------------------- liveness
    @property
    def alive(self) -> bool:
        """True while both lanes run, neither met a fatal error, and neither holds a batch its
        file refused (disk full, read-only: ``alive`` comes back once the batch commits)."""
        return all(lane.alive for lane in self._lanes)

    @property
    def failure(self) -> BaseException | None:
        """The fatal error that stopped a lane, or the storage error a lane's held batch
        waits out; None while both commit."""
        return next((lane.failure for lane in self._lanes if lane.failure is not None), None)

    @property
    def queue_depth(self) -> int:
        """Items waiting in both lanes (approximate)."""
        return sum(lane.queue_depth for lane in self._lanes)

    @property
    def stats(self) -> WriterStats:
        """Both lanes' counters added up (a snapshot)."""
        return WriterStats.merged(lane.stats for lane in self._lanes)

    # ----------------------------------------------------------------- shutdown
    def give_up_holds(self) -> None:
        """The server begins to stop: a batch the files refuse (held now or later) gets one
        last try, then fails with everything queued behind it (``WriterLane.give_up_holds``),
        so its waiters are answered now rather than when the server's grace period ends."""
        for lane in self._lanes:
            lane.give_up_holds()

    def stop(self, timeout: float | None = None) -> bool:
        """Refuse new work, commit everything queued, and end both threads.

        Returns False if a thread did not finish within ``timeout``. Does not checkpoint:
        the store does that once readers are gone. Idempotent.
        """
        for lane in self._lanes:
            lane.close_intake()
        deadline = None if timeout is None else time.monotonic() + timeout
        for lane in self._lanes:
            lane.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return all(lane.join(0) for lane in self._lanes)

    def checkpoint_now(self) -> None:
        """Checkpoint both files. Only once the lanes have stopped, or from their threads."""
        for lane in self._lanes:
            lane.checkpoint_now()
