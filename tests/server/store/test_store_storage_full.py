"""A disk that refuses writes (full, read-only): the writer holds the refused batch and
refuses new work until a retry commits, instead of dropping rows the clients were told were
written; closing meanwhile is prompt. Also: a checkpoint that fails fatally stops the writer
at once, and no checkpoint runs while a batch is held (it would fail, and kill the instance).
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import duckdb
import pytest

from agentconsole.server.store import OperatorAction, Store, StoreClosedError, StoreConfig
from agentconsole.server.store.batch import is_storage_failure
from agentconsole.server.store.lane import WriterLane
from agentconsole.server.store.preflight import wal_path
from agentconsole.server.store.sqlconn import SqlConnection
from tests.server.store.store_helpers import make_event

#: what DuckDB raises when a commit cannot write its WAL to a full disk (DuckDB 2.0.1's text)
NO_SPACE = (
    'TransactionContext Error: Failed to commit: Could not write file "/data/store.duckdb.wal":'
    " No space left on device"
)


class RefusingCommits:
    """A lane's connection whose ``COMMIT`` fails as on a full disk while ``refusing`` is set:
    the transaction is rolled back and DuckDB's error raised, as DuckDB does itself."""

    def __init__(self, con: SqlConnection, raises: Callable[[], Exception]) -> None:
        self._con = con
        self._raises = raises
        self.refusing = threading.Event()
        self.refused = 0

    def execute(self, sql: str, *args: Any) -> SqlConnection:
        if sql == "COMMIT" and self.refusing.is_set():
            self._con.execute("ROLLBACK")
            self.refused += 1
            raise self._raises()
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def refuse_commits(lane: WriterLane, raises: Callable[[], Exception]) -> RefusingCommits:
    """Put a :class:`RefusingCommits` between ``lane`` and its connection (not refusing yet)."""
    refusing = RefusingCommits(lane._con, raises)
    lane._con = cast(SqlConnection, refusing)
    return refusing


def wait_until(predicate: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)


def action(i: int) -> OperatorAction:
    return OperatorAction(float(i), "alice", "drain", f"w{i}", "ok")


def _count(store: Store, sql: str) -> int:
    with store.cursor() as cur:
        row = cur.execute(sql).fetchone()
        return int(row[0]) if row else 0


@pytest.mark.parametrize(
    ("error", "storage"),
    [
        (duckdb.TransactionException(NO_SPACE), True),
        (duckdb.IOException('Could not write file "x.tmp": Read-only file system'), True),
        (duckdb.IOException('Could not write file "x": Disk quota exceeded'), True),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EROFS, "Read-only file system"), True),
        # an item's own failure, or a conflict: not the disk's
        (duckdb.IOException("disk full"), False),
        (duckdb.ConstraintException("Duplicate key"), False),
        (duckdb.TransactionException("Conflict on tuple deletion"), False),
        (duckdb.Error("No space left on device"), False),
        (OSError(errno.EACCES, "Permission denied"), False),
        # fatal: the instance is gone, nothing to wait out
        (duckdb.FatalException(f"Failed to create checkpoint because of error: {NO_SPACE}"), False),
    ],
)
def test_storage_failures_are_told_from_the_items_own_errors(
    error: BaseException, storage: bool
) -> None:
    assert is_storage_failure(error) is storage


@pytest.mark.parametrize("own_process", [False, True], ids=["in-process", "db-process"])
def test_a_refused_commit_is_held_and_written_once_the_disk_has_room(
    db_path: Path, own_process: bool
) -> None:
    """Before: each refused item failed alone (one log line each) and the writer stayed
    "alive", so the rows of 2xx answers vanished while ``/ready`` said all was well."""
    config = StoreConfig(own_process=own_process, storage_retry_s=0.05)
    with Store.open(db_path, config) as store:
        main = refuse_commits(store.writer._main, lambda: duckdb.TransactionException(NO_SPACE))
        events = refuse_commits(store.writer._events, lambda: duckdb.TransactionException(NO_SPACE))
        main.refusing.set()
        events.refusing.set()
        for i in range(3):
            store.writer.put(action(i))  # fire and forget: the client had its 2xx already
        for i in range(5):
            store.writer.emit(make_event(i))
        wait_until(lambda: main.refused >= 2 and events.refused >= 2)  # retried, still held
        assert not store.writer.alive
        held_by = store.writer.failure  # a local: the property changes under mypy's feet
        assert isinstance(held_by, duckdb.TransactionException)
        with pytest.raises(StoreClosedError, match="cannot write to its files"):
            store.writer.put_durable(action(9))  # no caller left waiting on a full disk
        with pytest.raises(StoreClosedError, match="cannot write to its files"):
            store.writer.flush()
        assert store.writer.stats.failed_items == 0
        assert store.writer.stats.dropped == 0

        main.refusing.clear()  # space freed
        events.refusing.clear()
        wait_until(lambda: store.writer.alive)
        assert store.writer.failure is None
        store.writer.flush().result(timeout=10)
        assert _count(store, "SELECT count(*) FROM operator_actions") == 3
        assert store.repo.last_seq() == 5
        assert [s.seq for s in store.repo.events_since(0)] == [1, 2, 3, 4, 5]
        assert store.writer.stats.storage_failures >= 4
    with Store.open(db_path) as again:
        assert _count(again, "SELECT count(*) FROM operator_actions") == 3


def test_closing_while_the_disk_refuses_writes_is_prompt_and_counts_the_loss(
    db_path: Path,
) -> None:
    """Before: the close waited its whole timeout (30 s in ``serve``) while every queued item
    failed alone, then logged "not closed cleanly"."""
    store = Store.open(db_path, StoreConfig(storage_retry_s=60.0))
    main = refuse_commits(store.writer._main, lambda: duckdb.TransactionException(NO_SPACE))
    main.refusing.set()
    held = store.writer.put_durable(action(1))
    wait_until(lambda: not store.writer.alive)
    assert not held.done()  # held, not failed: the next retry may well commit it
    store.writer.put(action(2))
    started = time.monotonic()
    assert store.close(timeout=30) is False  # nothing checkpointed: the disk is full
    assert time.monotonic() - started < 5  # one last try, not the 60 s retry wait
    with pytest.raises(StoreClosedError):
        held.result(timeout=1)
    assert store.writer.stats.dropped == 2
    assert main.refused == 2  # the first try and the last one
    with Store.open(db_path) as again:
        assert again.writer.alive


def test_a_real_full_disk_holds_the_batch(db_path: Path) -> None:
    """DuckDB's own error on a WAL that cannot be written (``/dev/full``: every write gets
    ENOSPC) is recognised: the writer holds, where it used to fail the batch alone."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    store = Store.open(db_path, StoreConfig(storage_retry_s=60.0))
    wal = wal_path(db_path)
    assert not wal.exists()  # the open checkpointed; the next commit creates the WAL
    wal.symlink_to("/dev/full")
    try:
        store.writer.put(action(1))
        wait_until(lambda: not store.writer.alive)
        assert "No space left on device" in str(store.writer.failure)
        assert store.writer.stats.failed_items == 0
        assert store.close() is False
    finally:
        wal.unlink()
    with Store.open(db_path) as again:
        assert again.writer.alive


def test_no_checkpoint_runs_while_a_batch_is_held(db_path: Path) -> None:
    """Both files share the disk: a checkpoint during a hold would fail, and a failed
    checkpoint invalidates the instance, held batch and all."""
    store = Store.open(db_path, StoreConfig(storage_retry_s=0.05, idle_checkpoint_s=0.05))
    try:
        main = refuse_commits(store.writer._main, lambda: duckdb.TransactionException(NO_SPACE))
        main.refusing.set()
        store.writer.put(action(1))
        wait_until(lambda: store.writer._main.holding)
        events = store.writer._events
        before = events.stats.checkpoints
        assert store.writer.append(make_event(1)).result(timeout=10) == 1  # another file
        time.sleep(0.5)  # ten idle-checkpoint periods of the event lane
        assert events.stats.checkpoints == before
        main.refusing.clear()
        wait_until(lambda: store.writer.alive)
        wait_until(lambda: events.stats.checkpoints > before)
    finally:
        assert store.close() is True


class FailingCheckpoints:
    """A connection whose ``CHECKPOINT`` fails as DuckDB's does on a full disk: fatally."""

    def __init__(self, con: SqlConnection) -> None:
        self._con = con

    def execute(self, sql: str, *args: Any) -> SqlConnection:
        if sql.startswith("CHECKPOINT"):
            raise duckdb.FatalException(
                "FATAL Error: Failed to create checkpoint because of error: Could not write "
                'file "/data/store.duckdb": No space left on device'
            )
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def test_a_fatal_idle_checkpoint_stops_the_writer_at_once(db_path: Path) -> None:
    """Before: the failure was logged as a skipped checkpoint and the writer stayed "alive"
    over an invalidated instance until a write met it (and lost its batch)."""
    store = Store.open(db_path, StoreConfig(idle_checkpoint_s=0.05))
    lane = store.writer._events
    lane._con = cast(SqlConnection, FailingCheckpoints(lane._con))
    assert store.writer.append(make_event(1)).result(timeout=10) == 1
    wait_until(lambda: not store.writer.alive)
    assert isinstance(store.writer.failure, duckdb.FatalException)
    with pytest.raises(StoreClosedError, match="died"):
        store.writer.put_durable(action(1))  # the main lane stopped with it
    assert store.close() is False


def test_a_checkpoint_that_fails_at_close_is_reported_not_raised(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's shutdown gets False and one log line, not a traceback; the WAL keeps the
    commits for the next start."""
    store = Store.open(db_path)
    store.writer.put_durable(action(1)).result(timeout=10)

    def full_disk() -> None:
        raise duckdb.FatalException("Failed to create checkpoint: No space left on device")

    monkeypatch.setattr(store.writer, "checkpoint_now", full_disk)
    assert store.close() is False
    with Store.open(db_path) as again:
        assert _count(again, "SELECT count(*) FROM operator_actions") == 1
