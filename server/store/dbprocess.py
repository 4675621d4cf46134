"""The store's database process: owns the DuckDB instance and runs the statements it is sent.

Why a process: duckdb-python takes the GIL back after every task of a statement, and CPython
3.11 hands a contended GIL over only after a switch interval with no switch at all, so in the
serving process every request that arrived during a store batch waited for the whole batch
(``docs/BENCHMARKS.md`` section 7). Here DuckDB shares a GIL with nobody who serves.

Protocol (``remote.py`` is the other side): the parent writes one JSON line to stdin
(``{"address": ..., "authkey": hex}``); this process listens there (``AF_UNIX``, the authkey
checked), prints ``ready`` and serves each accepted channel in a thread of its own. A channel is
one DuckDB cursor: its first request is ``("connect", path, config)`` (the root, which opens
the database) or ``("cursor",)``; then ``("execute", sql, params)``, ``("register", name,
table)``, ``("unregister", name)``, ``("close",)``. Each request gets ``(True, rows)`` or
``(False, exception)``; ``rows`` is every row of the statement's result (the store reads
small results; the exports write with ``COPY``). ``("shutdown",)`` on the root closes the
database and ends the process. So does stdin's end (the parent died): at once, without
closing anything, as a crash would (committed transactions are in the WAL).

Signals: SIGINT and SIGTERM are ignored. A terminal's Ctrl-C reaches the whole process group,
and the database must close after the server's last write, which the parent decides.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection, Listener
from typing import Any

import duckdb

READY = "ready"


class _Database:
    """The one DuckDB connection of this process and the cursors of its channels."""

    def __init__(self) -> None:
        self.root: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()

    def open_root(self, path: str, config: dict[str, Any]) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self.root is not None:
                raise RuntimeError("the database is already open")
            self.root = duckdb.connect(path, config=config)
            return self.root

    def cursor(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self.root is None:
                raise RuntimeError("the database is not open")
            return self.root.cursor()


def _execute(con: duckdb.DuckDBPyConnection, sql: str, params: Any) -> list[tuple[Any, ...]]:
    con.execute(sql, params)
    return con.fetchall() if con.description is not None else []


def _answer(con: duckdb.DuckDBPyConnection, request: tuple[Any, ...]) -> Any:
    op = request[0]
    if op == "execute":
        return _execute(con, request[1], request[2])
    if op == "register":
        con.register(request[1], request[2])
        return None
    if op == "unregister":
        con.unregister(request[1])
        return None
    raise ValueError(f"unknown request {op!r}")


def _serve_channel(channel: Connection, database: _Database) -> None:
    """Answer one channel's requests until it closes (or asks for shutdown)."""
    con: duckdb.DuckDBPyConnection | None = None
    is_root = False
    try:
        while True:
            try:
                request = channel.recv()
            except (EOFError, OSError):
                return
            op = request[0]
            try:
                if op == "connect":
                    con, is_root = database.open_root(request[1], request[2]), True
                    result: Any = None
                elif op == "cursor":
                    con = database.cursor()
                    result = None
                elif op in ("close", "shutdown"):
                    if con is not None:
                        con.close()
                    channel.send((True, None))
                    if op == "shutdown" and is_root:
                        os._exit(0)
                    return
                elif con is None:
                    raise RuntimeError("the channel has no connection yet")
                else:
                    result = _answer(con, request)
            except Exception as error:  # every error goes back to the caller, typed
                channel.send((False, error))
            else:
                channel.send((True, result))
    finally:
        channel.close()


def _exit_when_parent_ends() -> None:
    """Read stdin to its end (the parent closed it or died), then end at once."""
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)


def main() -> None:
    """Serve the database for the parent process; see the module docstring."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    params = json.loads(sys.stdin.buffer.readline())
    listener = Listener(params["address"], "AF_UNIX", authkey=bytes.fromhex(params["authkey"]))
    database = _Database()
    threading.Thread(target=_exit_when_parent_ends, name="parent-watch", daemon=True).start()
    print(READY, flush=True)
    while True:
        try:
            channel = listener.accept()
        except (OSError, EOFError):  # a client that failed the authkey check
            continue
        threading.Thread(
            target=_serve_channel, args=(channel, database), name="store-channel", daemon=True
        ).start()


if __name__ == "__main__":
    main()
