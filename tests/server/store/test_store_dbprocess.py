"""DuckDB in a database process of its own (``dbprocess.py``, ``remote.py``): the connection
the store gets behaves as DuckDB's own, and the process lives and dies with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from agentconsole.server.store import Store, StoreClosedError, StoreConfig
from agentconsole.server.store.batch import is_fatal
from agentconsole.server.store.remote import RemoteConnection, connect_in_process
from tests.server.store.store_helpers import make_event

IN_OWN_PROCESS = StoreConfig(own_process=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still running"
        time.sleep(0.05)


def _database_pid(store: Store) -> int:
    con = store._con  # the root connection: a RemoteConnection here
    assert isinstance(con, RemoteConnection)
    return con.process_pid


def test_statements_results_errors_and_cursors_behave_as_duckdb(tmp_path: Path) -> None:
    con = connect_in_process(str(tmp_path / "x.duckdb"), {"threads": "1"})
    pid = con.process_pid
    try:
        con.execute("CREATE TABLE t (i INTEGER, s VARCHAR)")
        con.register("_src", pa.table({"i": [1, 2, 3], "s": ["a", "b", "c"]}))
        con.execute("INSERT INTO t SELECT * FROM _src")
        con.unregister("_src")
        assert con.execute("SELECT count(*) FROM t").fetchone() == (3,)
        con.execute("SELECT i FROM t ORDER BY i")
        assert con.fetchmany(2) == [(1,), (2,)]
        assert con.fetchall() == [(3,)]
        assert con.fetchone() is None
        with pytest.raises(duckdb.CatalogException, match="nope"):
            con.execute("SELECT * FROM nope")
        with pytest.raises(duckdb.CatalogException):  # a registration is per cursor, and gone
            con.execute("SELECT * FROM _src")

        other = con.cursor()
        other.execute("BEGIN TRANSACTION")
        other.execute("INSERT INTO t VALUES (4, 'd')")
        assert con.execute("SELECT count(*) FROM t").fetchone() == (3,)  # not committed
        other.execute("COMMIT")
        assert con.execute("SELECT count(*) FROM t").fetchone() == (4,)
        other.close()
        with pytest.raises(duckdb.ConnectionException):
            other.execute("SELECT 1")
    finally:
        con.close()
    _wait_gone(pid, timeout=5)  # closing the root ends the process


def test_an_open_refused_in_the_process_is_duckdbs_error_and_ends_it(tmp_path: Path) -> None:
    not_a_db = tmp_path / "junk.duckdb"
    not_a_db.write_bytes(b"not a database" * 1000)
    with pytest.raises(duckdb.Error):
        connect_in_process(str(not_a_db), {})
    assert not_a_db.read_bytes() == b"not a database" * 1000


def test_a_store_in_its_own_process_keeps_what_it_committed(db_path: Path) -> None:
    store = Store.open(db_path, IN_OWN_PROCESS)
    pid = _database_pid(store)
    assert pid != os.getpid()
    seqs = [store.writer.append(make_event(i)).result(timeout=10) for i in range(5)]
    for i in range(100):
        store.writer.emit(make_event(i, program="q"))
    assert store.close()
    _wait_gone(pid, timeout=5)
    with Store.open(db_path) as reopened:  # in this process: the same files
        events = reopened.repo.events_since(0, limit=1000)
        assert [e.seq for e in events][:5] == seqs
        assert len(events) == 105


def test_a_killed_database_process_stops_the_writer_and_loses_nothing_committed(
    db_path: Path,
) -> None:
    store = Store.open(db_path, IN_OWN_PROCESS)
    committed = store.writer.append(make_event(1)).result(timeout=10)
    pid = _database_pid(store)
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    pending = store.writer.append(make_event(2))  # the lane meets the dead process
    with pytest.raises((StoreClosedError, duckdb.Error)) as failure:
        pending.result(timeout=10)
    assert not store.writer.alive
    if isinstance(failure.value, duckdb.Error):
        assert is_fatal(failure.value)
    assert store.close() is False  # nothing could be checkpointed
    with Store.open(db_path) as reopened:  # the WAL replays what was committed
        assert [e.seq for e in reopened.repo.events_since(0, limit=10)] == [committed]


def test_the_database_process_ignores_ctrl_c_and_ends_with_its_parent(db_path: Path) -> None:
    code = (
        "import os, sys\n"
        "from agentconsole.server.store import Store, StoreConfig\n"
        "from tests.server.store.store_helpers import make_event\n"
        f"store = Store.open({str(db_path)!r}, StoreConfig(own_process=True))\n"
        "store.writer.append(make_event(1)).result(timeout=10)\n"
        "print(store._con.process_pid, flush=True)\n"
        "sys.stdin.readline()\n"
        "store.writer.append(make_event(2)).result(timeout=10)\n"
        "print('still writing', flush=True)\n"
        "sys.stdin.readline()\n"
        "os._exit(1)\n"  # a crash: nothing closed
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    assert parent.stdin is not None
    assert parent.stdout is not None
    try:
        pid = int(parent.stdout.readline())
        os.kill(pid, signal.SIGINT)  # what a terminal's Ctrl-C sends the whole group
        os.kill(pid, signal.SIGTERM)
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "still writing"
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.wait(30) == 1
        _wait_gone(pid)
    finally:
        parent.kill()
    with Store.open(db_path) as reopened:  # the lock went with the process; commits stayed
        assert len(reopened.repo.events_since(0, limit=10)) == 2
