"""The event log file: events live apart from the main file, are paired with it, and a stalled
event-log checkpoint never holds up an acknowledged write of the main file."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import cast

import duckdb
import pyarrow.parquet as pq
import pytest

from agentconsole.server.store import (
    OperatorAction,
    Store,
    StoreConfig,
    StoreOpenError,
    export_parquet,
)
from agentconsole.server.store.event_log import (
    EVENT_LOG,
    EVENTS,
    ROW_GROUP_SIZE,
    event_log_path,
    prepare_move,
)
from agentconsole.server.store.opening import attach_event_log
from agentconsole.server.store.preflight import wal_path
from agentconsole.server.store.schema import MIGRATIONS
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.syncmarks import PROJECTOR, SyncMarkRecord
from tests.server.store.store_helpers import (
    GatedConnection,
    digest,
    kill_after_acks,
    make_event,
    spawn,
    store_files,
    v1_store_with_events,
)


def _event_seqs(store: Store) -> list[int]:
    with store.cursor() as cur:
        return [int(r[0]) for r in cur.execute(f"SELECT seq FROM {EVENTS} ORDER BY seq").fetchall()]


def test_events_go_to_the_event_log_and_records_to_the_main_file(store: Store) -> None:
    main_wal = wal_path(store.path)
    main_wal_before = main_wal.stat().st_size if main_wal.exists() else 0
    for i in range(20_000):
        store.writer.emit(make_event(i))
    store.writer.flush().result(timeout=60)
    assert (main_wal.stat().st_size if main_wal.exists() else 0) == main_wal_before
    assert wal_path(store.info.event_log).stat().st_size > 0
    store.writer.put_durable(OperatorAction(1.0, "alice", "drain", "w", "ok")).result(10)
    assert main_wal.stat().st_size > main_wal_before
    with store.cursor() as cur:
        tables = cur.execute(
            "SELECT database_name, table_name FROM duckdb_tables() WHERE table_name = 'events'"
        ).fetchall()
    assert tables == [(EVENT_LOG, "events")]
    assert _event_seqs(store) == list(range(1, 20_001))


def test_the_event_log_is_written_in_small_row_groups(db_path: Path) -> None:
    # A checkpoint that completes a row group compresses all of it while the file's writes
    # wait, so the event log's row groups are small (ROW_GROUP_SIZE), also in a log that was
    # created with DuckDB's default and is opened again.
    n = 2 * ROW_GROUP_SIZE + 100
    for _ in range(2):
        with Store.open(db_path) as store:
            for i in range(n):
                store.writer.emit(make_event(i))
            store.writer.flush().result(timeout=60)
    with Store.open(db_path) as store, store.cursor() as cur:
        rows = cur.execute(
            f"SELECT count(*), count(DISTINCT row_group_id) FROM pragma_storage_info('{EVENTS}')"
            " WHERE column_id = 0"
        ).fetchall()
        assert store.repo.last_seq() == 2 * n
    assert rows[0][1] >= (2 * n) // ROW_GROUP_SIZE  # DuckDB's default would make it 1


def test_a_stalled_event_log_checkpoint_does_not_hold_up_durable_writes(db_path: Path) -> None:
    # DuckDB keeps one checkpoint lock per attached file, so this holds inside DuckDB too
    # (measured in docs/BENCHMARKS.md section 6); here the event lane's own checkpoint stalls.
    with Store.open(db_path, StoreConfig(idle_checkpoint_s=0.05)) as store:
        lane = store.writer._events
        stalling = GatedConnection(lane._con, "CHECKPOINT")
        lane._con = cast(SqlConnection, stalling)
        try:
            store.writer.append(make_event(1)).result(timeout=10)
            assert stalling.entered.wait(10)  # the idle checkpoint of the event log began
            for i in range(20):
                action = OperatorAction(float(i), "alice", "boost", f"p{i}", "ok")
                store.writer.put_durable(action).result(timeout=10)
            assert len(store.repo.audit_log(limit=50)) == 20
            pending = store.writer.append(make_event(2))
            assert not pending.done()  # events wait for their own file's checkpoint only
        finally:
            stalling.gate.set()
        assert pending.result(timeout=10) == 2


def test_a_version_1_store_moves_its_events_and_keeps_numbering(
    db_path: Path, tmp_path: Path
) -> None:
    v1_store_with_events(db_path, 5000)
    export_parquet(db_path, tmp_path / "before")  # a closed v1 file exports from the main file
    assert pq.read_table(tmp_path / "before" / "events.parquet").num_rows == 5000
    with Store.open(db_path) as store:
        assert (store.migration.before, store.migration.after) == (1, MIGRATIONS[-1].version)
        assert _event_seqs(store) == list(range(1, 5001))
        assert store.writer.append(make_event(1)).result(timeout=10) == 5001
        store.writer.put(SyncMarkRecord(PROJECTOR, 5001))  # rows up to date, as serve leaves them
        with store.cursor() as cur:
            left = cur.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'events'"
                " AND database_name = current_database()"
            ).fetchall()
        assert left == [(0,)]
    export_parquet(db_path, tmp_path / "after")  # a closed v2 store exports from the log
    assert pq.read_table(tmp_path / "after" / "events.parquet").num_rows == 5001


def test_a_move_interrupted_after_the_copy_completes_without_duplicates(db_path: Path) -> None:
    v1_store_with_events(db_path, 3000)
    con = duckdb.connect(str(db_path))
    attach_event_log(con, db_path, 1)
    prepare_move(con)  # the copy committed; the crash came before the version row
    prepare_move(con)  # and a second start got as far again
    con.close()
    with Store.open(db_path) as store:
        assert _event_seqs(store) == list(range(1, 3001))


def test_a_lost_event_log_is_refused_and_not_recreated(db_path: Path) -> None:
    with Store.open(db_path) as store:
        store.writer.append(make_event(1)).result(timeout=10)
    event_log_path(db_path).unlink()
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError, match="event log is missing"):
        Store.open(db_path)
    assert digest(*store_files(db_path)) == before
    assert not event_log_path(db_path).exists()


def test_another_stores_event_log_is_refused(db_path: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    for path in (db_path, other):
        Store.open(path).close()
    shutil.copyfile(event_log_path(other), event_log_path(db_path))
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError, match="belongs to another store"):
        Store.open(db_path)
    assert digest(*store_files(db_path)) == before


def test_a_foreign_file_in_the_event_log_place_is_refused(db_path: Path) -> None:
    Store.open(db_path).close()
    log = event_log_path(db_path)
    log.unlink()
    con = duckdb.connect(str(log))
    con.execute("CREATE TABLE customers (id INTEGER)")
    con.close()
    before = digest(*store_files(db_path))
    for _ in range(2):  # refused the same way again: nothing was half-done
        with pytest.raises(StoreOpenError, match="not an agentconsole event log"):
            Store.open(db_path)
    assert digest(*store_files(db_path)) == before


def test_an_event_log_without_its_database_is_refused_and_nothing_is_created(
    db_path: Path,
) -> None:
    Store.open(db_path).close()
    db_path.unlink()
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError, match="event log exists but its database does not"):
        Store.open(db_path)
    assert digest(*store_files(db_path)) == before
    assert not db_path.exists()


def test_another_stores_crashed_event_log_is_refused_before_its_wal_is_replayed(
    db_path: Path, tmp_path: Path
) -> None:
    Store.open(db_path).close()
    other = tmp_path / "other.duckdb"
    kill_after_acks(other, 200)
    for source, target in zip(store_files(other)[2:], store_files(db_path)[2:], strict=True):
        shutil.copyfile(source, target)  # the other store's event log and its WAL
    assert wal_path(event_log_path(db_path)).stat().st_size > 0
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError, match="belongs to another store"):
        Store.open(db_path)
    assert digest(*store_files(db_path)) == before  # the WAL was not replayed into the file


def test_a_second_open_in_the_serving_process_keeps_the_files_locked(
    store: Store, tmp_path: Path
) -> None:
    store.writer.append(make_event(1)).result(timeout=10)
    assert wal_path(store.info.event_log).stat().st_size > 0
    with pytest.raises(StoreOpenError, match="already open in this process"):
        Store.open(store.path)
    with pytest.raises(StoreOpenError, match="already open in this process"):
        export_parquet(store.path, tmp_path / "out")
    # a refusal that had opened and closed the files would have dropped DuckDB's locks
    for file in (store.path, store.info.event_log):
        child = spawn("open-raw", file)
        out, err = child.communicate(timeout=60)
        assert "Conflicting lock" in out + err, (out, err)


def test_an_event_log_held_by_another_process_is_refused(db_path: Path) -> None:
    Store.open(db_path).close()
    holder = spawn("hold", event_log_path(db_path))
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "HOLDING"
        with pytest.raises(StoreOpenError, match="locked by another process") as info:
            Store.open(db_path)
        assert str(event_log_path(db_path)) in str(info.value)
    finally:
        holder.kill()
        holder.wait(10)
    Store.open(db_path).close()


def test_export_in_the_middle_of_the_move_reads_the_complete_copy(
    db_path: Path, tmp_path: Path
) -> None:
    v1_store_with_events(db_path, 1000)
    con = duckdb.connect(str(db_path))
    attach_event_log(con, db_path, 1)
    prepare_move(con)
    con.execute(f"DELETE FROM {EVENTS}")  # as if killed before the copy committed
    con.close()
    export_parquet(db_path, tmp_path / "out")
    assert pq.read_table(tmp_path / "out" / "events.parquet").num_rows == 1000
    with Store.open(db_path) as store:  # and the next start finishes the move
        assert _event_seqs(store) == list(range(1, 1001))
