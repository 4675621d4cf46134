"""Parquet export from a live store and from a closed file."""

from __future__ import annotations

import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agentconsole.server.store import TABLES, OperatorAction, Store, StoreOpenError, export_parquet
from agentconsole.server.store.event_log import event_log_path
from agentconsole.server.store.preflight import wal_path
from agentconsole.server.store.syncmarks import PROJECTOR, SyncMarkRecord
from tests.server.store.store_helpers import digest, make_event, spawn, store_files


def _fill(store: Store) -> None:
    """A store as a server leaves it: its rows' mark (the projector's) at its last event."""
    for i in range(1000):
        store.writer.emit(make_event(i))
    store.writer.put(SyncMarkRecord(PROJECTOR, 1000))
    store.writer.put(OperatorAction(1.0, "alice", "drain", "worker-1", "ok"))
    store.intents.claim("k", "h", "p", "n", "t", side_effect=False, idempotent=True).result(10)
    store.writer.flush().result(10)


def test_export_of_a_live_store_writes_one_readable_file_per_table(
    store: Store, tmp_path: Path
) -> None:
    _fill(store)
    files = export_parquet(store, tmp_path / "out")
    assert sorted(f.stem for f in files) == sorted(TABLES)
    events = pq.read_table(tmp_path / "out" / "events.parquet")
    assert events.num_rows == 1000
    assert events.column("seq").to_pylist() == list(range(1, 1001))
    assert pq.read_table(tmp_path / "out" / "operator_actions.parquet").num_rows == 1
    assert pq.read_table(tmp_path / "out" / "tool_intents.parquet").num_rows == 1
    assert store.writer.append(make_event(1)).result(10) == 1001  # still serving


def test_export_of_a_closed_file_does_not_modify_it(db_path: Path, tmp_path: Path) -> None:
    with Store.open(db_path) as store:
        _fill(store)
    before = digest(*store_files(db_path))
    export_parquet(db_path, tmp_path / "out")
    assert digest(*store_files(db_path)) == before
    assert pq.read_table(tmp_path / "out" / "events.parquet").num_rows == 1000


def test_export_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StoreOpenError, match="does not exist"):
        export_parquet(tmp_path / "missing.duckdb", tmp_path / "out")
    assert not (tmp_path / "out").exists()  # no folder made for nothing


def test_the_export_command_refuses_an_out_dir_it_cannot_make(tmp_path: Path) -> None:
    """A traceback before (a FileNotFoundError from the folder's mkdir)."""
    from click.testing import CliRunner

    from agentconsole.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["export", "--db", str(tmp_path / "missing.duckdb"), str(blocker / "out")]
    refused = CliRunner().invoke(main, argv)
    assert refused.exit_code == 2, refused.output
    assert f"OUT_DIR: {blocker} is not a folder" in refused.output


def test_export_after_a_crash_reads_the_wal_without_replaying_it_into_the_file(
    db_path: Path, tmp_path: Path
) -> None:
    child = spawn("events", db_path, "1000000")
    assert child.stdout is not None
    acked = 0
    for line in child.stdout:
        if line.startswith("ACK"):
            acked = int(line.split()[1])
            if acked >= 500:
                break
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert wal_path(event_log_path(db_path)).stat().st_size > 0
    before = digest(*store_files(db_path))
    # the crashed writer's events name programs no row reflects (no projector wrote any):
    # the export refuses, naming how many it read, the WAL's among them, and how to replay them
    with pytest.raises(StoreOpenError, match="committed events of its programs") as refused:
        export_parquet(db_path, tmp_path / "out")
    assert digest(*store_files(db_path)) == before
    behind = int(str(refused.value).split("(")[1].split()[0])
    assert behind * 2 >= acked - 100  # one event in two names a program (crash_child.py)
    assert "agentconsole serve --runtime sim" in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_export_refuses_an_event_log_wal_duckdb_would_ignore(db_path: Path, tmp_path: Path) -> None:
    with Store.open(db_path) as store:
        _fill(store)
    wal = wal_path(event_log_path(db_path))
    wal.write_bytes(b"\x00" * 64)  # a WAL where a clean shutdown left none: not DuckDB's
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError, match="write-ahead log"):
        export_parquet(db_path, tmp_path / "out")
    assert digest(*store_files(db_path)) == before
