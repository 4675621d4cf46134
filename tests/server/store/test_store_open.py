"""Open safety: held, damaged or foreign files stop start-up and are never modified."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agentconsole.server.store import OperatorAction, Store, StoreOpenError
from agentconsole.server.store.event_log import event_log_path
from agentconsole.server.store.export import read_only
from agentconsole.server.store.preflight import wal_path
from tests.server.store.store_helpers import digest, kill_after_acks, make_event, spawn, store_files


def _crashed_with_wal(db: Path) -> tuple[Path, bytes]:
    """A store killed by SIGKILL with committed events still only in the event log's WAL."""
    kill_after_acks(db, 300)
    wal = wal_path(event_log_path(db))
    return wal, wal.read_bytes()


def test_second_process_gets_store_open_error_and_file_is_untouched(store: Store) -> None:
    store.writer.append(make_event(1)).result(timeout=10)
    db = store.path
    before = digest(*store_files(db))
    child = spawn("open", db)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 3, err
    assert "locked by another process" in out
    assert f"PID {os.getpid()}" in out
    assert str(db) in out
    assert digest(*store_files(db)) == before
    assert store.writer.append(make_event(2)).result(timeout=10) == 2


def test_read_only_holder_elsewhere_blocks_start_with_clear_error(db_path: Path) -> None:
    Store.open(db_path).close()
    holder = spawn("hold", db_path)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "HOLDING"
        before = digest(db_path)
        with pytest.raises(StoreOpenError, match=rf"locked by another process \(PID {holder.pid}"):
            Store.open(db_path)
        assert digest(db_path) == before
    finally:
        holder.kill()
        holder.wait(10)
    Store.open(db_path).close()


def test_same_process_cannot_open_the_file_twice(store: Store) -> None:
    with pytest.raises(StoreOpenError, match="already open in this process"):
        Store.open(store.path)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: os.urandom(len(b)), id="garbage"),
        pytest.param(lambda b: b[:5000], id="truncated-header"),
        pytest.param(lambda b: b[: len(b) // 2], id="truncated-half"),
        pytest.param(lambda b: b"", id="empty"),
    ],
)
def test_damaged_database_file_is_refused_and_byte_identical(
    db_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    with Store.open(db_path) as store:
        for i in range(2000):
            store.writer.emit(make_event(i))
    db_path.write_bytes(damage(db_path.read_bytes()))
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError) as info:
        Store.open(db_path)
    assert str(db_path) in str(info.value)
    assert info.value.remedy
    assert digest(*store_files(db_path)) == before


@pytest.mark.parametrize("name", ["store.json", "store.csv", "store.duckdb"])
def test_a_file_that_is_no_duckdb_database_is_called_so_whatever_its_name(
    tmp_path: Path, name: str
) -> None:
    """DuckDB reads a ``.json`` path as a JSON scan: "cannot launch in-memory database in
    read-only mode", explained as a damaged store to restore from a backup. The header says
    what the file is, for the server, ``export`` and ``trace export`` alike."""
    path = tmp_path / name
    path.write_text("hello\n")
    with pytest.raises(StoreOpenError, match="not a DuckDB database"):
        Store.open(path)
    with pytest.raises(StoreOpenError, match="not a DuckDB database"), read_only(path):
        pass
    assert path.read_text() == "hello\n"


def test_corrupt_wal_entry_is_refused_and_both_files_kept(db_path: Path, tmp_path: Path) -> None:
    wal, data = _crashed_with_wal(db_path)
    middle = len(data) // 2
    wal.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError, match="cannot be replayed"):
        Store.open(db_path)
    assert digest(*store_files(db_path)) == before


@pytest.mark.parametrize("kind", ["garbage-header", "foreign-wal", "orphan-wal"])
def test_wal_duckdb_would_silently_discard_is_refused(
    db_path: Path, tmp_path: Path, kind: str
) -> None:
    wal, data = _crashed_with_wal(db_path)
    if kind == "garbage-header":
        wal.write_bytes(os.urandom(64) + data[64:])
    elif kind == "foreign-wal":
        other = tmp_path / "other.duckdb"
        _crashed_with_wal(other)
        shutil.copyfile(wal_path(event_log_path(other)), wal)
    else:
        event_log_path(db_path).unlink()
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError, match="write-ahead log"):
        Store.open(db_path)
    assert digest(*store_files(db_path)) == before


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreOpenError, match="does not exist"):
        Store.open(tmp_path / "nope" / "store.duckdb")
    assert not (tmp_path / "nope").exists()


def test_not_a_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreOpenError, match="not a regular file"):
        Store.open(tmp_path)


@pytest.mark.parametrize("which", ["database", "event log"])
def test_truncation_anywhere_is_refused_and_byte_identical(db_path: Path, which: str) -> None:
    with Store.open(db_path) as store:
        for i in range(60_000):
            store.writer.emit(make_event(i))
        for i in range(2_000):
            store.writer.put(OperatorAction(float(i), "alice", "boost", f"p{i}", "ok"))
    target = db_path if which == "database" else event_log_path(db_path)
    data = target.read_bytes()
    for fraction in (0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99):
        target.write_bytes(data[: int(len(data) * fraction)])
        before = digest(*store_files(db_path))
        with pytest.raises(StoreOpenError, match=r"damaged|truncated|not a DuckDB"):
            Store.open(db_path)
        assert digest(*store_files(db_path)) == before, fraction
