"""One writer lane: a thread that owns one DuckDB connection and group-commits its queue.

The thread takes everything queued (up to ``max_batch_rows``), writes it in **one**
transaction with one bulk statement per table, commits (one fsync), and only then resolves the
futures of that batch. Batches grow by themselves while a commit is in flight, so there is no
timer on the latency path; ``linger_s`` can add one.

A failed batch is rolled back; a transaction conflict retries it, any other error retries
it by halves down to the bad item, so one bad item fails only its own future. A fatal DuckDB
error (the database invalidated, e.g. by a failed fsync or checkpoint) stops the lane:
``alive`` turns false, every pending future fails with :class:`StoreClosedError`, and the
process must restart (reopening replays the WAL).

A commit the storage refuses (disk full, read-only file system: :func:`is_storage_failure`)
is neither: the batch is not at fault, and its fire-and-forget rows were answered 2xx
already, so failing it would lose them. The lane *holds* it instead: ``alive`` turns false
(the API answers writes 503, ``/ready`` says ``store: false``), new acknowledged work is
refused, and the same batch is retried every ``storage_retry_s`` until it commits, when the
lane carries on as before. Closing while held makes one last try, then fails what is held
(counted in ``stats.dropped``) at once rather than waiting out the close's timeout; so does
:meth:`WriterLane.give_up_holds` (the server begins to stop, and the requests waiting on the
held batch must be answered before the HTTP server's grace period ends), while the lane,
holding nothing, still takes writes.

Checkpoints happen here only, never inside a COMMIT (DuckDB's automatic checkpoint is off in
effect: ``config.DUCKDB_CHECKPOINT_THRESHOLD``): after a batch that took the WAL past
``checkpoint_threshold``, and when the lane is idle. A checkpoint that cannot write
invalidates the instance (the whole store stops until a restart), where a commit that cannot
write only holds its batch, so none is started that the storage may refuse: none while a lane
holds a batch, and none while the disk (or the process's file-size limit) leaves less room
than the checkpoint may need (:func:`checkpoint_need`). Skipped, the WAL keeps growing until
room comes back or the disk fills; then commits are refused and held, which the store
survives.
"""

from __future__ import annotations

import logging
import os
import queue
import resource
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any

import duckdb

from agentconsole.server.store.batch import Batch, apply_batch, is_fatal, is_storage_failure
from agentconsole.server.store.config import StoreConfig
from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.errors import StoreClosedError
from agentconsole.server.store.ops import Op
from agentconsole.server.store.preflight import wal_path
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.stats import WriterStats

log = logging.getLogger(__name__)
_STOP = object()


class _SeqGap:
    """Events dropped at a full queue, queued in their place: the numbers the hub gave them
    are skipped there, so every later event's store seq stays its hub seq (the rows' sync
    marks and the feed's cursors are hub numbers). Counted up while no event is queued
    behind it and the lane has not taken it."""

    __slots__ = ("events", "taken")

    def __init__(self) -> None:
        self.events = 0
        self.taken = False


#: the lane's database in DuckDB's catalog functions (its ``database`` parameter: the
#: connection's current database when empty)
_LANES_DB = "database_name = coalesce(nullif(?, ''), current_database())"

#: Room a checkpoint must find beyond its WAL's size. The WAL's size covers the rows: the
#: store never updates in place (upserts delete and insert, ``bulk.py``), so a checkpoint
#: writes the WAL's rows once, compressed (measured: 0.13-0.4 times the WAL in new blocks).
#: The rest is what the WAL does not show: the file grows by whole 256 KiB blocks, the
#: metadata and free list of every table touched are written anew before the old ones are
#: freed, and the other lane's file on the same disk keeps committing meanwhile. Too much
#: costs little (checkpoints stop a few MB sooner on a disk about to fill anyway); too
#: little invalidates the store.
CHECKPOINT_HEADROOM_BYTES = 8 * 1024 * 1024
#: Rows in one of DuckDB's row groups (its default ``row_group_size``).
ROW_GROUP_ROWS = 122_880
#: What a checkpoint writes anew for one row group whose rows were updated in place (the
#: intents' state changes, ``intent_ops._SET_STATE``): the updated columns of the whole
#: group, however few rows changed and however small their WAL entries (measured with
#: DuckDB 2.0.1 on ``tool_intents``: ~0.9 MB a row group touched, for a WAL of ~500 bytes).
ROW_GROUP_REWRITE_BYTES = 1024 * 1024


def checkpoint_need(wal_bytes: int, rewritten_row_groups: int = 0) -> int:
    """Bytes of room a checkpoint of a ``wal_bytes`` WAL must find before it runs, when
    ``rewritten_row_groups`` stored row groups had rows updated in place since the last."""
    return wal_bytes + CHECKPOINT_HEADROOM_BYTES + rewritten_row_groups * ROW_GROUP_REWRITE_BYTES


def room_to_grow(file: Path) -> int:
    """Bytes ``file`` may still grow by: its file system's free space (what an unprivileged
    writer may use, as ``shutil.disk_usage`` says; none on a read-only mount), capped by
    this process's file-size limit (``RLIMIT_FSIZE``, e.g. systemd's ``LimitFSIZE=``: a
    write past it fails with EFBIG; a database process inherits it). 0 when it cannot be
    told. Reads metadata only: this process must not open the database file (``preflight``).
    """
    try:
        fs = os.statvfs(file.parent)
        size = file.stat().st_size
    except OSError:
        return 0
    if fs.f_flag & os.ST_RDONLY:
        return 0
    room = fs.f_bavail * fs.f_frsize
    limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit != resource.RLIM_INFINITY:
        room = min(room, limit - size)
    return max(room, 0)


def settle(future: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``future`` with ``value`` or ``error``; a future the caller cancelled is left
    alone (the write itself stands)."""
    try:
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass


class WriterLane:
    """Owns ``con`` from :meth:`start` until :meth:`stop` returns; see the module docstring.

    ``numbered`` maps each writer-numbered sequence (``"events"``, a table name) to the table
    and column its committed maximum is read from; ``database`` is what ``CHECKPOINT`` names
    (the connection's current database when empty); ``checkpoints_paused`` says when
    checkpoints must wait (another lane on the same disk holds a batch).
    """

    def __init__(
        self,
        name: str,
        con: SqlConnection,
        config: StoreConfig,
        crash: CrashPoints,
        numbered: dict[str, tuple[str, str]],
        database: str = "",
        on_death: Callable[[BaseException], None] | None = None,
        checkpoints_paused: Callable[[], bool] | None = None,
    ) -> None:
        self.name = name
        self._on_death = on_death
        self._checkpoints_paused = checkpoints_paused or (lambda: False)
        self._con = con
        self._config = config
        self._crash = crash
        self._database = database
        self._checkpoint_sql = f"CHECKPOINT {database}".strip()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        # the gap the last dropped events left, while nothing was queued behind it
        self._gap: _SeqGap | None = None
        self._gap_lock = threading.Lock()
        self._submit_lock = threading.Lock()
        # Set by every item someone waits on (and by shutdown): it cuts a linger short.
        self._urgent = threading.Event()
        self._closing = False
        self._failure: BaseException | None = None
        # The storage error a held batch waits out (None when commits go through).
        self._stalled: BaseException | None = None
        # Cuts a held batch's wait between retries short: set on close, abort and give-up.
        self._wake = threading.Event()
        # Set once the server stops: a batch the storage refuses gets one last try, no hold.
        self._no_holds = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._seqs = self._load_seqs(numbered)
        self._file = self._database_file(database)
        self._wal = None if self._file is None else wal_path(self._file)
        self._checkpoint_bytes = config.checkpoint_threshold_bytes
        # Why checkpoints are being skipped (None while they run): logged when that begins and
        # when it ends, not at every batch that finds it so.
        self._checkpoints_skipped: str | None = None
        #: tables -> rows updated in place since the last checkpoint (``Txn.updated_in_place``)
        self._updated_in_place: dict[str, int] = {}
        self.stats = WriterStats()

    def _load_seqs(self, numbered: dict[str, tuple[str, str]]) -> dict[str, int]:
        """Next value of every writer-numbered column, from the committed maxima."""
        seqs = {}
        for key, (table, column) in numbered.items():
            # fetchall, not fetchone: an unconsumed result keeps its transaction open, and an
            # open transaction on this connection would block every CHECKPOINT until the
            # lane's first batch.
            rows = self._con.execute(f"SELECT coalesce(max({column}), 0) FROM {table}").fetchall()
            seqs[key] = int(rows[0][0]) + 1
        return seqs

    def _database_file(self, database: str) -> Path | None:
        """The file this lane's ``CHECKPOINT`` writes (None in memory)."""
        rows = self._con.execute(
            f"SELECT path FROM duckdb_databases() WHERE {_LANES_DB}",
            [database],
        ).fetchall()
        return Path(rows[0][0]) if rows and rows[0][0] else None

    # ----------------------------------------------------------------- producer side
    def start(self) -> None:
        """Start the lane's thread. From here on only that thread uses the connection."""
        self._thread.start()

    def offer(self, item: object, *, bounded: bool) -> None:
        """Queue ``item`` without waiting; never blocks, never raises.

        Dropped (and counted in ``stats.dropped``) when the lane is closed or dead, and, if
        ``bounded`` (an event), when the queue is over ``max_queue``: the hot path must not
        stall; the numbers of events dropped so are skipped (:class:`_SeqGap`).
        """
        if self._closing:
            self.stats.dropped += 1
            return
        if bounded and self._queue.qsize() >= self._config.max_queue:
            self.stats.dropped += 1
            self._leave_gap()
            return
        self._gap = None
        self._queue.put(item)
        # Closed between the check and the put? Then the lane may have drained for the last
        # time already: count, do not lose. ``_closing`` first: a plain read, where asking
        # the thread whether it lives costs more than the put.
        if self._closed_meanwhile() and self._ended():
            self._count_leftovers()

    def _leave_gap(self) -> None:
        """One more event dropped here: counted in the gap queued last, or in a new one."""
        with self._gap_lock:
            gap = self._gap
            if gap is None or gap.taken:
                gap = self._gap = _SeqGap()
                self._queue.put(gap)
            gap.events += 1

    def _skip(self, gap: _SeqGap) -> None:
        """Leave ``gap``'s numbers unused (on the lane's thread)."""
        with self._gap_lock:
            gap.taken = True
            self._seqs["events"] += gap.events

    def _closed_meanwhile(self) -> bool:
        """``_closing`` read again after a put: another thread may have set it since the
        caller's check (a call, so the type checker does not carry that check's answer over)."""
        return self._closing

    def submit(self, item: object) -> None:
        """Queue ``item``, which carries a future; raises :class:`StoreClosedError` if closed
        or while a batch is held (the storage refuses writes): its caller would otherwise
        wait, unanswered, for as long as the disk stays full."""
        # The lock orders this put against stop()'s sentinel: an item with a future is
        # either refused here or processed before the thread exits, never left hanging.
        with self._submit_lock:
            if self._closing or self._stalled is not None:
                raise StoreClosedError(self._closed_reason())
            self._queue.put(item)
        self._urgent.set()

    def _closed_reason(self) -> str:
        if self._failure is not None:
            return f"the store writer died: {self._failure!r}"
        stalled = self._stalled
        if stalled is not None:
            return f"the store cannot write to its files ({stalled}); writes resume once it can"
        return "the store is closed"

    # ----------------------------------------------------------------- liveness
    @property
    def alive(self) -> bool:
        """True while the thread runs, no fatal error has occurred and no batch is held."""
        return self._thread.is_alive() and self._failure is None and self._stalled is None

    @property
    def holding(self) -> bool:
        """Whether a batch whose commit the storage refused is held for a retry."""
        return self._stalled is not None

    @property
    def failure(self) -> BaseException | None:
        """What keeps the lane from committing: the fatal error that stopped it, or the
        storage error a held batch waits out (None again once a retry commits). Readers
        that would wait for a commit first read past it instead (nothing commits now)."""
        return self._failure if self._failure is not None else self._stalled

    @property
    def queue_depth(self) -> int:
        """Items waiting (approximate)."""
        return self._queue.qsize()

    # ----------------------------------------------------------------- shutdown
    def close_intake(self) -> None:
        """Refuse new work; what is queued still commits. Idempotent."""
        with self._submit_lock:
            if not self._closing:
                self._closing = True
                self._queue.put(_STOP)
        self._urgent.set()
        self._wake.set()

    def give_up_holds(self) -> None:
        """From now on, hold no batch: one the storage refuses (the one held now, if any) gets
        one last try, then it and everything queued fail at once, counted and logged, as on
        close. Until then the lane takes and commits work as usual. Idempotent."""
        self._no_holds = True
        self._wake.set()

    def abort(self, error: BaseException) -> None:
        """Stop because another lane of the same DuckDB instance died of ``error``: refuse new
        work and fail what is queued (the batch being written, if any, ends on its own)."""
        with self._submit_lock:
            if self._failure is None:
                self._failure = error
            if not self._closing:
                self._closing = True
                self._queue.put(_STOP)
        self._urgent.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; False if it did not within ``timeout``. Items that
        were queued after the thread's last drain are counted as dropped."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._ended():
            self._count_leftovers()
        return not self._thread.is_alive()

    def _ended(self) -> bool:
        return self._thread.ident is not None and not self._thread.is_alive()

    def _count_leftovers(self) -> None:
        self.stats.dropped += sum(not isinstance(i, _SeqGap) for i in self._drain())

    def checkpoint_now(self) -> None:
        """Run ``CHECKPOINT``. Only the thread that owns the connection may call it."""
        self._crash.hit("during_checkpoint")
        self._con.execute(self._checkpoint_sql)
        self._updated_in_place.clear()
        self.stats.checkpointed()

    # ----------------------------------------------------------------- the thread
    def _run(self) -> None:
        idle = max(self._config.idle_checkpoint_s, 0.05)
        stopping = False
        while not stopping:
            try:
                items = self._take(idle)
            except queue.Empty:
                if not self._checkpoint_when_idle():
                    return
                continue
            if items and items[-1] is _STOP:
                items.pop()
                items.extend(self._drain())
                stopping = True
            if self._failure is not None:  # aborted: nothing more is written, nothing hangs
                items.extend(self._drain())
                _batch_of(items).fail(StoreClosedError(self._closed_reason()), settle)
                return
            if items and not self._process_between_gaps(items):
                return
            if not stopping and not self._checkpoint_when_wal_full():
                return
        # offer() takes no lock (it is the hot path), so a fire-and-forget item can land
        # behind the stop sentinel: it is not written, but it is counted, not lost silently
        # (items with futures cannot: submit() checks under the lock); one that lands after
        # this drain is counted by offer() or join()
        self._count_leftovers()

    def _take(self, idle: float) -> list[object]:
        first = self._queue.get(timeout=idle)
        items = [first]
        if first is _STOP:
            return items
        if self._should_linger(first):
            # Nobody waits on this item: linger, then take what came, so that one wake-up of
            # this thread (which takes the GIL from the serving threads) and one commit cover
            # many items; waiting on the queue instead would wake it for every single item.
            # An item someone waits on ends the linger at once.
            self._urgent.wait(self._config.linger_s)
        # Whatever raised the signal so far is queued, and the drain below takes it; if the
        # drain stops at a full batch, what is left may hold such an item: signal again.
        self._urgent.clear()
        while len(items) < self._config.max_batch_rows:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return items
            items.append(item)
            if item is _STOP:
                return items
        self._urgent.set()
        return items

    def _should_linger(self, first: object) -> bool:
        """Linger after ``first`` only if nobody waits on it and no full batch is queued
        already (under a backlog a linger would only cap the ingest rate)."""
        return (
            self._config.linger_s > 0
            and not isinstance(first, tuple | Op)
            and self._queue.qsize() < self._config.max_batch_rows
        )

    def _drain(self) -> list[object]:
        items: list[object] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return items
            if item is not _STOP:
                items.append(item)

    def _process_between_gaps(self, items: list[object]) -> bool:
        """:meth:`_process` the runs of ``items`` between gaps, skipping each gap's numbers;
        False if the lane died (what is left fails)."""
        start = 0
        for i, item in enumerate(items):
            if isinstance(item, _SeqGap):
                if start < i and not self._process(items[start:i]):
                    _batch_of(items[i:]).fail(StoreClosedError(self._closed_reason()), settle)
                    return False
                self._skip(item)
                start = i + 1
        return start == len(items) or self._process(items[start:])

    def _process(self, items: list[object]) -> bool:
        """Write ``items`` (whole, or one by one after an error); False if the lane died."""
        self.stats.busy_since = time.monotonic()
        try:
            batch = Batch.collect(items)
            error = self._write(batch)
            if error is None:
                return True
            if is_fatal(error):
                self._die(error, batch)
                return False
            if is_storage_failure(error):
                return self._hold(items, error)
            if len(items) == 1:
                log.error("store write failed: %r", error)
                self.stats.failed_items += 1
                if batch.events:
                    # a dropped event keeps its number, a gap in the store: the hub gave it
                    # that seq, and every later event's store seq must stay its hub seq (the
                    # rows' sync marks and the feed's cursors are hub numbers)
                    self._seqs["events"] += len(batch.events)
                batch.fail(error, settle)
                return True
            # Isolate the bad item(s) by halves, in order (one bad item among n costs ~2 log2 n
            # commits, not n: each alone made a 5,000-row batch 5,000 fsyncs); if the lane dies
            # in the first half, fail the second.
            first, second = items[: len(items) // 2], items[len(items) // 2 :]
            if not self._process(first):
                Batch.collect(second).fail(StoreClosedError(self._closed_reason()), settle)
                return False
            return self._process(second)
        finally:
            self.stats.busy_since = None

    def _write(self, batch: Batch) -> BaseException | None:
        for attempt in range(self._config.conflict_retries + 1):
            started = time.monotonic()
            try:
                seqs = apply_batch(self._con, batch, dict(self._seqs), self._crash)
            except duckdb.TransactionException as error:
                # a commit that could not write its WAL is one too, but no conflict
                if attempt == self._config.conflict_retries or is_storage_failure(error):
                    return error
                continue
            except Exception as error:
                return error
            self._seqs = seqs
            for table, rows in batch.updated_in_place.items():
                self._updated_in_place[table] = self._updated_in_place.get(table, 0) + rows
            self.stats.committed(batch, time.monotonic() - started)
            batch.resolve(settle)
            return None
        raise AssertionError("unreachable")

    def _hold(self, items: list[object], error: BaseException) -> bool:
        """Keep ``items``, whose commit the storage refused with ``error``, and retry them
        until they commit (True); False if the lane ended first (see the module docstring).

        Not dying is the point: a dead lane would drop the held rows, and everything queued
        behind them, though the clients were told they were written."""
        self._stalled = error
        self.stats.storage_failures += 1
        log.critical(
            "store writer %s cannot write to its files (%s): holding %d items and refusing "
            "writes (503, /ready store: false); retrying every %g s",
            self.name,
            error,
            len(items),
            self._config.storage_retry_s,
        )
        started = time.monotonic()
        while True:
            if not self._last_try_due():
                self._wake.wait(self._config.storage_retry_s)
                self._wake.clear()
            # a close (or give-up) asked for before this try makes it the last: a prompt
            # shutdown
            closing = self._last_try_due()
            if self._failure is not None:  # aborted: the other lane died
                break
            batch = Batch.collect(items)
            retried = self._write(batch)
            if retried is None:
                self._stalled = None
                log.warning(
                    "store writer %s writes again: the %d held items committed after %.1f s",
                    self.name,
                    len(items),
                    time.monotonic() - started,
                )
                return True
            if is_fatal(retried):
                self._stalled = None
                self._die(retried, batch)
                return False
            if not is_storage_failure(retried):  # the storage is back; this is the items' own
                self._stalled = None
                return self._process(items)
            error = retried
            self.stats.storage_failures += 1
            if closing:
                break
            log.debug("store writer %s still cannot write: %s", self.name, error)
        self._give_up(items, error)
        return False

    def _last_try_due(self) -> bool:
        """Whether the next try of a held batch is its last (closing, or holds given up)."""
        return self._closing or self._no_holds

    def _give_up(self, items: list[object], error: BaseException) -> None:
        """End a hold without a commit: fail the held and queued items, count them lost."""
        with self._submit_lock:
            if self._failure is None:
                # so the store's close skips its checkpoint and reports the loss
                self._failure = error
            self._closing = True
        self._stalled = None
        lost = [i for i in items + self._drain() if not isinstance(i, _SeqGap)]
        Batch.collect(lost).fail(StoreClosedError(self._closed_reason()), settle)
        self.stats.dropped += len(lost)
        log.critical(
            "store writer %s stopped with %d items not written: its files still refuse writes (%s)",
            self.name,
            len(lost),
            error,
        )

    def _die(self, error: BaseException, batch: Batch) -> None:
        log.critical("store writer %s stopped by a fatal DuckDB error: %r", self.name, error)
        with self._submit_lock:
            self._failure = error
            self._closing = True
        closed = StoreClosedError(self._closed_reason())
        batch.fail(closed, settle)
        _batch_of(self._drain()).fail(closed, settle)
        if self._on_death is not None:
            self._on_death(error)

    def _checkpoint_when_idle(self) -> bool:
        """Checkpoint if anything committed since the last; False if that killed the lane."""
        if self.stats.commits_since_checkpoint == 0:
            return True
        return self._checkpoint_if_safe()

    def _checkpoint_when_wal_full(self) -> bool:
        """Checkpoint once the WAL has reached ``checkpoint_threshold``; False if that killed
        the lane. One ``stat`` a batch below it."""
        if self._wal_bytes() < self._checkpoint_bytes:
            return True
        return self._checkpoint_if_safe()

    def _wal_bytes(self) -> int:
        if self._wal is None:
            return 0
        try:
            return self._wal.stat().st_size
        except FileNotFoundError:  # a checkpoint removes it; the next commit makes it anew
            return 0

    def _checkpoint_if_safe(self) -> bool:
        """Checkpoint unless the storage may refuse it (see the module docstring); False if it
        killed the lane."""
        if self._checkpoints_paused():
            return True  # the hold's own log says why; retried once it ends
        skip = self._no_room_for_checkpoint()
        if skip is not None:
            self._skip_checkpoints(skip)
            return True
        try:
            self.checkpoint_now()
        except duckdb.Error as error:
            if is_fatal(error):
                # a checkpoint that could not write invalidates the instance: say so now,
                # not at the next write, whose batch would be lost with it
                self._die(error, Batch())
                return False
            self._skip_checkpoints(str(error))  # e.g. a conflict; tried again later
            return True
        if self._checkpoints_skipped is not None:
            log.warning("store writer %s checkpoints again", self.name)
            self._checkpoints_skipped = None
        return True

    def _no_room_for_checkpoint(self) -> str | None:
        """Why the disk cannot take a checkpoint of this lane's file now, or None if it can."""
        if self._file is None:
            return None
        wal = self._wal_bytes()
        need = checkpoint_need(wal, self._rewritten_row_groups())
        room = room_to_grow(self._file)
        if room >= need:
            return None
        return (
            f"{room:,} bytes of room left for {self._file}, and a checkpoint of its {wal:,}-byte "
            f"WAL may need {need:,}"
        )

    def _rewritten_row_groups(self) -> int:
        """Row groups a checkpoint may rewrite for the rows updated in place since the last:
        at most one per update, at most every row group of the table."""
        groups = 0
        for table, updates in self._updated_in_place.items():
            rows = self._con.execute(
                f"SELECT estimated_size FROM duckdb_tables() WHERE table_name = ? AND {_LANES_DB}",
                [table, self._database],
            ).fetchall()
            stored = int(rows[0][0] or 0) if rows else 0
            groups += min(updates, -(-stored // ROW_GROUP_ROWS))
        return groups

    def _skip_checkpoints(self, reason: str) -> None:
        self.stats.checkpoints_skipped += 1
        if self._checkpoints_skipped is None:
            log.warning(
                "store writer %s skips checkpoints: %s; writes go on into its WAL (held if the "
                "disk fills) until a checkpoint can run",
                self.name,
                reason,
            )
        self._checkpoints_skipped = reason


def _batch_of(items: list[object]) -> Batch:
    """The batch of queued ``items``, the gap markers among them left out."""
    return Batch.collect(i for i in items if not isinstance(i, _SeqGap))
