"""The single writer: one thread owns the read-write connection and group-commits a queue.

Producers never touch DuckDB. They enqueue events (:meth:`StoreWriter.emit`, fire and forget,
the ``EventSink`` protocol), acknowledged events (:meth:`StoreWriter.append`), records and ops;
the thread takes everything queued (up to ``max_batch_rows``), writes it in **one**
transaction with one bulk statement per table, commits (one fsync), and only then resolves the
futures of that batch. Batches grow by themselves while a commit is in flight, so there is no
timer on the latency path; ``linger_s`` can add one.

A failed batch is rolled back; a transaction conflict retries it, any other error retries
each item alone so one bad item fails only its own future. A fatal DuckDB error (the
database invalidated, e.g. by a failed fsync) stops the writer: ``alive`` turns false, every
pending future fails with :class:`StoreClosedError`, and the process must restart (reopening
replays the WAL).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

import duckdb

from agentconsole.scheduler.events import Event
from agentconsole.server.store.batch import Batch, apply_batch, is_fatal
from agentconsole.server.store.config import StoreConfig
from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.errors import StoreClosedError
from agentconsole.server.store.ops import BarrierOp, CallOp, Op
from agentconsole.server.store.records import NUMBERED_SPECS, Record
from agentconsole.server.store.stats import WriterStats

log = logging.getLogger(__name__)
T = TypeVar("T")
_STOP = object()


def _settle(future: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    try:
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)
    except InvalidStateError:  # the caller cancelled it; the write itself stands
        pass


class StoreWriter:
    """Owns ``con`` from :meth:`start` until :meth:`stop` returns; see the module docstring."""

    def __init__(self, con: duckdb.DuckDBPyConnection, config: StoreConfig) -> None:
        self._con = con
        self._config = config
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._crash = CrashPoints.from_env()
        self._submit_lock = threading.Lock()
        self._closing = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self._seqs = self._load_seqs()
        self.stats = WriterStats()

    def _load_seqs(self) -> dict[str, int]:
        """Next value of every writer-numbered column, from the committed maxima."""
        seqs = {}
        numbered = [("events", "seq")] + [
            (spec.table, spec.seq_column) for spec in NUMBERED_SPECS if spec.seq_column
        ]
        for table, column in numbered:
            row = self._con.execute(f"SELECT coalesce(max({column}), 0) FROM {table}").fetchone()
            seqs[table] = int(row[0]) + 1 if row else 1
        return seqs

    # ----------------------------------------------------------------- producer side
    def start(self) -> None:
        """Start the writer thread. From here on only that thread uses the connection."""
        self._thread.start()

    def emit(self, event: Event) -> None:
        """Queue ``event`` without waiting (``EventSink``). Never blocks, never raises.

        Dropped (and counted in ``stats.dropped``) when the queue is over ``max_queue`` or
        the writer is closed or dead: the hot path must not stall on the store.
        """
        if self._closing or self._queue.qsize() >= self._config.max_queue:
            self.stats.dropped += 1
            return
        self._queue.put(event)

    def append(self, event: Event) -> Future[int]:
        """Queue ``event``; the future resolves to its ``seq`` once its batch has committed.

        Raises :class:`StoreClosedError` if the writer is closed or dead. Await it from
        asyncio with ``asyncio.wrap_future``.
        """
        future: Future[int] = Future()
        self._submit((event, future))
        return future

    def put(self, record: Record) -> None:
        """Queue an upsert/append of ``record`` without waiting (dropped when closed)."""
        if self._closing:
            self.stats.dropped += 1
            return
        self._queue.put(record)

    def put_durable(self, record: Record) -> Future[None]:
        """Queue ``record``; the future resolves once it has committed."""
        future: Future[None] = Future()
        self._submit((record, future))
        return future

    def submit(self, op: Op[T]) -> Future[T]:
        """Queue ``op``; its future resolves with ``op.apply``'s value after commit."""
        self._submit(op)
        return op.future

    def call(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> Future[T]:
        """Run ``fn(con)`` in the writer thread, inside a batch transaction. Keep it short:
        every producer waits for it."""
        return self.submit(CallOp(fn))

    def flush(self) -> Future[None]:
        """A future that resolves once everything queued before this call has committed."""
        return self.submit(BarrierOp())

    def _submit(self, item: object) -> None:
        # The lock orders this put against stop()'s sentinel: an item with a future is
        # either refused here or processed before the writer exits, never left hanging.
        with self._submit_lock:
            if self._closing:
                raise StoreClosedError(self._closed_reason())
            self._queue.put(item)

    def _closed_reason(self) -> str:
        if self._failure is not None:
            return f"the store writer died: {self._failure!r}"
        return "the store is closed"

    # ----------------------------------------------------------------- liveness
    @property
    def alive(self) -> bool:
        """True while the thread runs and no fatal error has occurred."""
        return self._thread.is_alive() and self._failure is None

    @property
    def failure(self) -> BaseException | None:
        """The fatal error that stopped the writer, if any."""
        return self._failure

    @property
    def queue_depth(self) -> int:
        """Items waiting (approximate)."""
        return self._queue.qsize()

    # ----------------------------------------------------------------- shutdown
    def stop(self, timeout: float | None = None) -> bool:
        """Refuse new work, commit everything queued, and end the thread.

        Returns False if the thread did not finish within ``timeout``. Does not checkpoint:
        the store does that once readers are gone. Idempotent.
        """
        with self._submit_lock:
            if not self._closing:
                self._closing = True
                self._queue.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    # ----------------------------------------------------------------- writer thread
    def _run(self) -> None:
        idle = max(self._config.idle_checkpoint_s, 0.05)
        stopping = False
        while not stopping:
            try:
                items = self._take(idle)
            except queue.Empty:
                self._maybe_checkpoint()
                continue
            if items and items[-1] is _STOP:
                items.pop()
                items.extend(self._drain())
                stopping = True
            if items and not self._process(items):
                return

    def _take(self, idle: float) -> list[object]:
        first = self._queue.get(timeout=idle)
        items = [first]
        if first is _STOP:
            return items
        linger = self._config.linger_s
        deadline = time.monotonic() + linger if linger > 0 else 0.0
        while len(items) < self._config.max_batch_rows:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
            items.append(item)
            if item is _STOP:
                break
        return items

    def _drain(self) -> list[object]:
        items: list[object] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return items
            if item is not _STOP:
                items.append(item)

    def _process(self, items: list[object]) -> bool:
        """Write ``items`` (whole, or one by one after an error); False if the writer died."""
        self.stats.busy_since = time.monotonic()
        try:
            batch = Batch.collect(items)
            error = self._write(batch)
            if error is None:
                return True
            if is_fatal(error):
                self._die(error, batch)
                return False
            if len(items) == 1:
                log.error("store write failed: %r", error)
                self.stats.failed_items += 1
                batch.fail(error, _settle)
                return True
            # Isolate the bad item(s): each alone, stopping if the writer dies.
            return all(self._process([item]) for item in items)
        finally:
            self.stats.busy_since = None

    def _write(self, batch: Batch) -> BaseException | None:
        for attempt in range(self._config.conflict_retries + 1):
            started = time.monotonic()
            try:
                seqs = apply_batch(self._con, batch, dict(self._seqs), self._crash)
            except duckdb.TransactionException as error:
                if attempt == self._config.conflict_retries:
                    return error
                continue
            except Exception as error:
                return error
            self._seqs = seqs
            self.stats.committed(batch, time.monotonic() - started)
            batch.resolve(_settle)
            return None
        raise AssertionError("unreachable")

    def _die(self, error: BaseException, batch: Batch) -> None:
        log.critical("store writer stopped by a fatal DuckDB error: %r", error)
        with self._submit_lock:
            self._failure = error
            self._closing = True
        closed = StoreClosedError(self._closed_reason())
        batch.fail(closed, _settle)
        Batch.collect(self._drain()).fail(closed, _settle)

    def _maybe_checkpoint(self) -> None:
        if self.stats.commits_since_checkpoint == 0:
            return
        try:
            self.checkpoint_now()
        except duckdb.Error as error:  # e.g. a reader holds a transaction; try again later
            log.info("idle checkpoint skipped: %s", error)

    def checkpoint_now(self) -> None:
        """Run ``CHECKPOINT``. Only the thread that owns the connection may call it."""
        self._crash.hit("during_checkpoint")
        self._con.execute("CHECKPOINT")
        self.stats.checkpointed()
