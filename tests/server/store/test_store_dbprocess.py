"""DuckDB in a database process of its own (``dbprocess.py``, ``remote.py``): the connection
the store gets behaves as DuckDB's own, and the process lives and dies with its parent."""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from agentconsole.server.store import Store, StoreClosedError, StoreConfig
from agentconsole.server.store.batch import is_fatal
from agentconsole.server.store.dbprocess import ROWS_PER_ANSWER
from agentconsole.server.store.opening import _holder_exiting
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
        "print(store._con.process_pid, store._con._process.address, flush=True)\n"
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
        pid_text, address = parent.stdout.readline().split()
        pid = int(pid_text)
        os.kill(pid, signal.SIGINT)  # what a terminal's Ctrl-C sends the whole group
        os.kill(pid, signal.SIGTERM)
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "still writing"
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.wait(30) == 1
        _wait_gone(pid)
        assert not Path(address).parent.exists()  # the socket's directory went with it
    finally:
        parent.kill()
    with Store.open(db_path) as reopened:  # the lock went with the process; commits stayed
        assert len(reopened.repo.events_since(0, limit=10)) == 2


def test_large_results_stream_and_fetches_agree_with_duckdb(tmp_path: Path) -> None:
    rows = 2 * ROWS_PER_ANSWER + 7
    sql = f"SELECT i, i * 2 FROM range({rows}) t(i) ORDER BY i"
    local = duckdb.connect()
    con = connect_in_process(str(tmp_path / "x.duckdb"), {})
    try:
        for db in (local, con):
            db.execute(sql)
        assert con.fetchone() == local.fetchone()
        assert con.fetchmany(ROWS_PER_ANSWER + 3) == local.fetchmany(ROWS_PER_ANSWER + 3)
        assert con.fetchall() == local.fetchall()
        assert con.fetchall() == [] == local.fetchall()
        con.execute("SELECT 1")
        with pytest.raises(duckdb.CatalogException):
            con.execute("SELECT * FROM nope")
        assert con.fetchall() == []  # a failed statement leaves no rows of the one before
    finally:
        con.close()
        local.close()


def _refuse() -> None:
    raise ValueError("not here")


class _Unreadable:
    """A parameter that pickles but cannot be unpickled (in the database process)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_refuse, ())


def test_peers_without_the_key_and_unreadable_requests_harm_no_one(tmp_path: Path) -> None:
    con = connect_in_process(str(tmp_path / "x.duckdb"), {})
    process = con._process
    try:
        with pytest.raises(AuthenticationError):
            Client(process.address, "AF_UNIX", authkey=b"wrong")
        silent = socket.socket(socket.AF_UNIX)
        silent.connect(process.address)  # connects and never says a word
        try:
            cursor = con.cursor()  # answered anyway: the handshake is the channel's
            assert cursor.execute("SELECT 42").fetchone() == (42,)
            cursor.close()
        finally:
            silent.close()
        with pytest.raises(RuntimeError, match="unreadable request"):
            con.execute("SELECT ?", [_Unreadable()])

        class Local:  # cannot even be pickled here: nothing is sent
            pass

        with pytest.raises((AttributeError, pickle.PicklingError)):
            con.execute("SELECT ?", [Local()])
        assert con.execute("SELECT 1").fetchone() == (1,)  # the channel goes on
        fd1 = os.readlink(f"/proc/{con.process_pid}/fd/1")
        assert fd1 == os.devnull  # nothing can fill a pipe nobody reads
    finally:
        con.close()
    assert not Path(process.address).parent.exists()


def test_an_open_waits_only_for_a_lock_holder_that_is_exiting() -> None:
    def conflict(pid: int) -> duckdb.IOException:
        return duckdb.IOException(f"Conflicting lock is held in /usr/bin/python3 (PID {pid}).")

    assert not _holder_exiting(conflict(os.getpid()))  # alive: refuse at once
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()  # reaped: no such process any more
    assert _holder_exiting(conflict(finished.pid))
    assert not _holder_exiting(duckdb.IOException("not a lock conflict"))
    assert not _holder_exiting(None)
