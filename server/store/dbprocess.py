"""The store's database process: owns the DuckDB instance and runs the statements it is sent.

Why a process: duckdb-python takes the GIL back after every task of a statement, and CPython
3.11 hands a contended GIL over only after a switch interval with no switch at all, so in the
serving process every request that arrived during a store batch waited for the whole batch
(``docs/BENCHMARKS.md`` section 7). Here DuckDB shares a GIL with nobody who serves.

Protocol (``remote.py`` is the other side): the parent writes one JSON line to stdin
(``{"address": ..., "authkey": hex}``); this process listens there (``AF_UNIX``, the authkey
checked), prints ``ready`` and serves each accepted channel in a thread of its own. A channel is
one DuckDB cursor: its first request is ``("connect", path, config)`` (the root, which opens
the database) or ``("cursor",)``; then ``("execute", sql, params)``, ``("more",)``,
``("register", name, table)``, ``("unregister", name)``, ``("close",)``. Each request gets
``(True, value)`` or ``(False, exception)``; a statement's value is ``(rows, more)``: up to
:data:`ROWS_PER_ANSWER` rows of its result, ``more`` saying whether ``("more",)`` has others.
``("shutdown",)`` on the root closes the database and ends the process. So does stdin's end
(the parent died): at once, without closing anything, as a crash would (committed
transactions are in the WAL). Either way the socket's directory goes with the process.

The authkey handshake runs in the channel's thread, so a peer that connects and stays
silent, or fails the check, costs only its own thread. Once ready, stdout is /dev/null: the
parent reads nothing more from it, and a full pipe would block whoever wrote to it.

Signals: SIGINT and SIGTERM are ignored. A terminal's Ctrl-C reaches the whole process group,
and the database must close after the server's last write, which the parent decides.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import (
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)
from pathlib import Path
from typing import Any

import duckdb

READY = "ready"
#: Rows a statement's answer carries at most; the rest follow on ``("more",)``.
ROWS_PER_ANSWER = 10_000


class _Database:
    """The one DuckDB connection of this process and the cursors of its channels."""

    def __init__(self, socket_dir: Path) -> None:
        self.root: duckdb.DuckDBPyConnection | None = None
        self.socket_dir = socket_dir
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

    def end(self) -> None:
        """End the process now, its socket's directory removed."""
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        os._exit(0)


def _rows(con: duckdb.DuckDBPyConnection) -> tuple[list[tuple[Any, ...]], bool]:
    rows = con.fetchmany(ROWS_PER_ANSWER)
    return rows, len(rows) == ROWS_PER_ANSWER


def _answer(con: duckdb.DuckDBPyConnection, request: tuple[Any, ...]) -> Any:
    op = request[0]
    if op == "execute":
        con.execute(request[1], request[2])
        return _rows(con) if con.description is not None else ([], False)
    if op == "more":
        return _rows(con)
    if op == "register":
        con.register(request[1], request[2])
        return None
    if op == "unregister":
        con.unregister(request[1])
        return None
    raise ValueError(f"unknown request {op!r}")


def _reply(channel: Connection, ok: bool, value: Any) -> None:
    """Send one answer; one that cannot be pickled goes back as an error saying so."""
    try:
        channel.send((ok, value))
    except (OSError, EOFError):
        raise
    except Exception as error:
        channel.send((False, RuntimeError(f"the database process could not answer: {error!r}")))


def _serve_channel(channel: Connection, database: _Database, authkey: bytes) -> None:
    """Check the peer's authkey, then answer its requests until it closes (or asks for
    shutdown)."""
    con: duckdb.DuckDBPyConnection | None = None
    is_root = False
    try:
        deliver_challenge(channel, authkey)
        answer_challenge(channel, authkey)
        while True:
            try:
                request = channel.recv()
            except (EOFError, OSError):
                return
            except Exception as error:  # a request that cannot be unpickled here
                _reply(channel, False, RuntimeError(f"unreadable request: {error!r}"))
                continue
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
                        database.end()
                    return
                elif con is None:
                    raise RuntimeError("the channel has no connection yet")
                else:
                    result = _answer(con, request)
            except Exception as error:  # every error goes back to the caller, typed
                _reply(channel, False, error)
            else:
                _reply(channel, True, result)
    except (AuthenticationError, EOFError, OSError):
        return  # a peer without the key, or one that left
    finally:
        channel.close()


def _end_with_parent(database: _Database) -> None:
    """Read stdin to its end (the parent closed it or died), then end at once."""
    while sys.stdin.buffer.read(4096):
        pass
    database.end()


def main() -> None:
    """Serve the database for the parent process; see the module docstring."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    params = json.loads(sys.stdin.buffer.readline())
    authkey = bytes.fromhex(params["authkey"])
    listener = Listener(params["address"], "AF_UNIX")  # the handshake is the channel's
    database = _Database(Path(params["address"]).parent)
    threading.Thread(
        target=_end_with_parent, args=(database,), name="parent-watch", daemon=True
    ).start()
    print(READY, flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    while True:
        try:
            channel = listener.accept()
        except OSError:
            continue
        threading.Thread(
            target=_serve_channel,
            args=(channel, database, authkey),
            name="store-channel",
            daemon=True,
        ).start()


if __name__ == "__main__":
    main()
