"""The parent's side of the database process (:mod:`dbprocess`): connections that forward.

:func:`connect_in_process` starts the process and returns a :class:`RemoteConnection`, which
does what the store asks of a ``duckdb.DuckDBPyConnection`` (``execute`` and the fetches,
``register``/``unregister`` of Arrow tables, ``cursor``, ``close``), each call one round trip
on a channel of its own (a Unix socket; one thread of the process per channel, as one
DuckDB cursor per thread here). Waiting for the answer releases the GIL, so a store batch
costs the serving thread only what building its Arrow tables costs.

DuckDB's own exceptions come back as themselves, so every caller's ``except duckdb.Error``
and :func:`batch.is_fatal` work unchanged. If the process is gone (killed, out of memory), a
call raises ``duckdb.FatalException``: for the store that is a database invalidated, which
stops the writer and asks for a restart, as any fatal DuckDB error does.
"""

from __future__ import annotations

import json
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

import duckdb

from agentconsole.server.store.dbprocess import READY

#: The database process's module, as its command line names it.
DBPROCESS_MODULE = "agentconsole.server.store.dbprocess"
#: How long the process may take to start (imports) and to close (a final checkpoint).
START_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 60.0
#: The longest temporary directory the socket goes into (AF_UNIX paths have 107 bytes).
_MAX_SOCKET_DIR = 80


class DatabaseProcess:
    """The running process and how to reach it; shared by all connections to it."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="agentconsole-db-")
        if len(self._dir) > _MAX_SOCKET_DIR:  # a long TMPDIR: AF_UNIX paths are short
            shutil.rmtree(self._dir)
            self._dir = tempfile.mkdtemp(prefix="agentconsole-db-", dir="/tmp")
        self.address = str(Path(self._dir) / "db.sock")
        self._authkey = secrets.token_bytes(32)
        self._proc = subprocess.Popen(
            # not ``-m``: the store package imports the module before runpy would run it
            [sys.executable, "-c", f"from {DBPROCESS_MODULE} import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._lock = threading.Lock()
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        params = {"address": self.address, "authkey": self._authkey.hex()}
        self._proc.stdin.write(json.dumps(params).encode() + b"\n")
        self._proc.stdin.flush()
        started, _, _ = select.select([self._proc.stdout], [], [], START_TIMEOUT_S)
        line = self._proc.stdout.readline().decode().strip() if started else ""
        if line != READY:
            self.kill()
            raise duckdb.IOException(
                f"the store's database process did not start within {START_TIMEOUT_S:.0f} s"
                f" (it said {line!r}; its errors are on this process's stderr)"
            )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def channel(self) -> Connection:
        """A new channel to the process (a cursor once asked for one)."""
        try:
            return Client(self.address, "AF_UNIX", authkey=self._authkey)
        except (OSError, EOFError) as error:
            raise gone(error) from error

    def wait(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Wait for the process to end, killing it past ``timeout``. Its stdin is closed
        first, which ends it at once if a shutdown did not (a channel that failed)."""
        self._close_pipes()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._cleanup()

    def kill(self) -> None:
        """End the process now (nothing is closed: as a crash, the WAL keeps the commits)."""
        self._proc.kill()
        self._proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        self._close_pipes()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _close_pipes(self) -> None:
        with self._lock:
            if self._proc.stdin is not None and not self._proc.stdin.closed:
                self._proc.stdin.close()
            if self._proc.stdout is not None and not self._proc.stdout.closed:
                self._proc.stdout.close()


def gone(error: BaseException) -> duckdb.FatalException:
    """The error a call raises when the database process is no longer there."""
    return duckdb.FatalException(f"the store's database process is gone ({error!r})")


class RemoteConnection:
    """One channel: a DuckDB cursor in the database process. Not thread-safe (as a cursor)."""

    def __init__(self, process: DatabaseProcess, *, root: bool = False) -> None:
        self._process = process
        self._channel = process.channel()
        self._root = root
        self._rows: list[tuple[Any, ...]] = []  # of the last statement, read from _next
        self._next = 0
        self._more = False  # the process holds more of them
        self._closed = False

    @property
    def process_pid(self) -> int:
        """The database process's PID."""
        return self._process.pid

    def _call(self, *request: Any) -> Any:
        if self._closed:
            raise duckdb.ConnectionException("Connection already closed!")
        try:
            self._channel.send(request)
            ok, value = self._channel.recv()
        except (OSError, EOFError) as error:
            raise gone(error) from error
        if not ok:
            raise value
        return value

    def execute(self, query: str, parameters: object = None) -> RemoteConnection:
        """Run ``query`` in the process; its first rows come back with the answer, the rest
        as the fetches ask for them."""
        self._rows, self._next, self._more = [], 0, False
        self._rows, self._more = self._call("execute", query, parameters)
        return self

    def _take(self, size: int | None) -> list[tuple[Any, ...]]:
        """Up to ``size`` (None: all) of the statement's rows not fetched yet."""
        out: list[tuple[Any, ...]] = []
        while size is None or len(out) < size:
            if self._next == len(self._rows):
                if not self._more:
                    break
                self._rows, self._more = self._call("more")
                self._next = 0
                continue
            want = len(self._rows) - self._next if size is None else size - len(out)
            piece = self._rows[self._next : self._next + want]
            out += piece
            self._next += len(piece)
        return out

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self._take(1)
        return rows[0] if rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._take(None)

    def fetchmany(self, size: int = 1) -> list[tuple[Any, ...]]:
        return self._take(size)

    def register(self, view_name: str, python_object: object) -> RemoteConnection:
        """Register an Arrow table (it travels pickled) as ``view_name`` for this cursor."""
        self._call("register", view_name, python_object)
        return self

    def unregister(self, view_name: str) -> RemoteConnection:
        self._call("unregister", view_name)
        return self

    def cursor(self) -> RemoteConnection:
        """A new cursor of the same database (its own channel and snapshot)."""
        cur = RemoteConnection(self._process)
        try:
            cur._call("cursor")
        except BaseException:
            cur._closed = True
            cur._channel.close()
            raise
        return cur

    def close(self) -> None:
        """Close this cursor; closing the root also closes the database and ends the process."""
        if self._closed:
            return
        try:
            self._call("shutdown" if self._root else "close")
        except duckdb.FatalException:
            pass  # already gone: nothing left to close
        finally:
            self._closed = True
            self._channel.close()
            if self._root:
                self._process.wait()


def connect_in_process(path: str, config: dict[str, Any]) -> RemoteConnection:
    """Open ``path`` with ``config`` in a database process of its own; the root connection.

    Raises what ``duckdb.connect`` would (the process is then ended).
    """
    process = DatabaseProcess()
    try:
        root = RemoteConnection(process, root=True)
        root._call("connect", path, config)
    except BaseException:
        process.kill()
        raise
    return root
