"""One group-commit batch: sorting queued items, writing them in one transaction, settling.

The queue holds bare :class:`Event` values (fire and forget), ``(event | record, future)``
pairs (acknowledged), bare records, and :class:`Op` instances. :meth:`Batch.collect` sorts
them; :func:`apply_batch` writes them with ``BEGIN ... COMMIT`` and fires the crash points;
:meth:`Batch.resolve` settles the futures once the commit is durable.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import duckdb

from agentconsole.scheduler.events import Event
from agentconsole.server.store.bulk import insert_events, write_records
from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.ops import DEFERRED, Op, Txn
from agentconsole.server.store.records import Record
from agentconsole.server.store.sqlconn import SqlConnection

Settle = Callable[..., None]


@dataclass(slots=True)
class Batch:
    """Items of one transaction, sorted by kind, in queue order within each kind."""

    events: list[Event] = field(default_factory=list)
    event_acks: list[tuple[int, Future[int]]] = field(default_factory=list)
    records: dict[type[Record], list[Record]] = field(default_factory=dict)
    record_acks: list[Future[None]] = field(default_factory=list)
    ops: list[Op[Any]] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    #: what the committed ops updated in place (``Txn.updated_in_place``)
    updated_in_place: dict[str, int] = field(default_factory=dict)
    first_seq: int = 0

    @classmethod
    def collect(cls, items: Iterable[object]) -> Batch:
        """Sort queued ``items`` into a batch."""
        batch = cls()
        for item in items:
            if type(item) is Event:
                batch.events.append(item)
            elif isinstance(item, Op):
                batch.ops.append(item)
            elif isinstance(item, tuple):
                payload, future = item
                if type(payload) is Event:
                    batch.event_acks.append((len(batch.events), future))
                    batch.events.append(payload)
                else:
                    batch._add_record(payload)
                    batch.record_acks.append(future)
            else:
                batch._add_record(item)
        return batch

    def _add_record(self, record: Any) -> None:
        # Grouped by class, whose hash is its id: a TableSpec's hash walks all its columns.
        self.records.setdefault(type(record), []).append(record)

    @property
    def n_events(self) -> int:
        """Events in the batch."""
        return len(self.events)

    @property
    def n_rows(self) -> int:
        """Events, records and ops in the batch."""
        return len(self.events) + sum(map(len, self.records.values())) + len(self.ops)

    def resolve(self, settle: Settle) -> None:
        """After commit: run the ops' in-memory effects, then settle every future."""
        for callback in self.after_commit:
            callback()
        for index, future in self.event_acks:
            settle(future, self.first_seq + index)
        for rfuture in self.record_acks:
            settle(rfuture, None)
        for op, result in zip(self.ops, self.results, strict=True):
            if result is not DEFERRED:
                settle(op.future, result)

    def fail(self, error: BaseException, settle: Settle) -> None:
        """Fail every future of the batch with ``error`` (nothing of it was committed)."""
        for _, future in self.event_acks:
            settle(future, None, error)
        for rfuture in self.record_acks:
            settle(rfuture, None, error)
        for op in self.ops:
            settle(op.future, None, error)


def is_fatal(error: BaseException) -> bool:
    """Whether ``error`` leaves the database instance unusable (restart and replay needed)."""
    return isinstance(error, duckdb.FatalException) or "invalidated" in str(error)


#: Why a file system refuses a write whatever is written: full, read-only, over quota, past
#: the process's file-size limit (``RLIMIT_FSIZE``: "File too large"), or failing. DuckDB puts
#: the operating system's text in its message ("Failed to commit: Could not write file
#: ".../store.duckdb.wal": No space left on device"), not the errno.
STORAGE_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG, errno.EIO)
_STORAGE_REASONS = tuple(os.strerror(number) for number in STORAGE_ERRNOS)


def is_storage_failure(error: BaseException) -> bool:
    """Whether ``error`` is the storage refusing a write (disk full, read-only file system),
    not the batch's fault: the same batch commits once space is freed or the file system is
    writable again (DuckDB rolls a failed commit's WAL back, and the instance stays usable).

    Matched narrowly, by DuckDB's class (a commit's WAL write fails as a
    ``TransactionException``, a spill or another file write as an ``IOException``) and the
    operating system's reason, so an item's own error still fails that item alone; a
    :func:`is_fatal` error (a failed checkpoint invalidates the instance) is not one.
    """
    if isinstance(error, OSError):
        return error.errno in STORAGE_ERRNOS
    if is_fatal(error) or not isinstance(error, duckdb.IOException | duckdb.TransactionException):
        return False
    message = str(error)
    return any(reason in message for reason in _STORAGE_REASONS)


def apply_batch(
    con: SqlConnection, batch: Batch, seqs: dict[str, int], crash: CrashPoints
) -> dict[str, int]:
    """Write ``batch`` in one transaction and commit; return the advanced sequence counters.

    ``seqs`` maps a table to its next writer-assigned number and is updated in place (the
    caller passes a copy so a rolled-back attempt leaves its counters untouched). On any
    error the transaction is rolled back and the error re-raised.
    """
    txn = Txn(con=con, now=time.time())
    con.execute("BEGIN TRANSACTION")
    try:
        if batch.events:
            batch.first_seq = seqs["events"]
            insert_events(con, batch.events, batch.first_seq)
            seqs["events"] += len(batch.events)
            crash.hit("mid_batch_commit")
        for record_type, records in batch.records.items():
            spec = record_type.SPEC
            first = seqs.get(spec.table, 0)
            write_records(con, spec, records, first)
            if spec.seq_column:
                seqs[spec.table] = first + len(records)
        batch.results = [op.apply(txn) for op in batch.ops]
        if txn.wrote_intent:
            crash.hit("before_intent_commit")
        if txn.wrote_result:
            crash.hit("before_result_commit")
        con.execute("COMMIT")
    except BaseException:
        # The instance may be invalidated; the caller decides from the first error.
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    if txn.wrote_intent:
        crash.hit("after_intent_commit")
    if txn.wrote_result:
        crash.hit("after_result_commit_before_ack")
    batch.after_commit = txn.after_commit
    batch.updated_in_place = txn.updated_in_place
    return seqs
