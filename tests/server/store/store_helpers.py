"""Helpers shared by the store tests: events, file digests, the crash child process."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import duckdb

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.store.event_log import event_log_path
from agentconsole.server.store.preflight import wal_path
from agentconsole.server.store.schema import MIGRATIONS
from agentconsole.server.store.sqlconn import SqlConnection

CHILD = Path(__file__).with_name("crash_child.py")


def make_event(i: int, program: str = "p", tenant: str = "t") -> Event:
    """A distinguishable event number ``i``."""
    return Event(
        t=float(i),
        kind=EventKind.CALL_FINISHED,
        program_id=f"{program}{i % 7}",
        node_id=f"n{i}",
        attempt=i % 3,
        tenant=tenant,
        data={"i": i, "ok": i % 2 == 0},
    )


def store_files(db: Path) -> tuple[Path, ...]:
    """Every file of the store at ``db``: the database, its event log, and their WALs."""
    log = event_log_path(db)
    return (db, wal_path(db), log, wal_path(log))


def digest(*paths: Path) -> dict[str, str | None]:
    """SHA-256 of each path (``None`` if absent), to prove files were not touched.

    Hashed in a child process on purpose: closing any descriptor of a database file in the
    process that holds it open drops DuckDB's POSIX lock on it.
    """
    script = (
        "import hashlib, sys\n"
        "for p in sys.argv[1:]:\n"
        "    print(hashlib.sha256(open(p, 'rb').read()).hexdigest())"
    )
    present = [p for p in paths if p.exists()]
    out = subprocess.run(
        [sys.executable, "-c", script, *map(str, present)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hashes = dict(zip(map(str, present), out, strict=True))
    return {str(p): hashes.get(str(p)) for p in paths}


def kill_after_acks(db: Path, acks: int) -> None:
    """Run the ``events`` child on ``db`` and SIGKILL it once ``acks`` events were
    acknowledged: a store with committed events still only in its event log's WAL."""
    child = spawn("events", db, "1000000")
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("ACK") and int(line.split()[1]) >= acks:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert wal_path(event_log_path(db)).stat().st_size > 0


def spawn(
    mode: str, db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start :mod:`crash_child` in ``mode`` on ``db`` with stdout as a text pipe."""
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(db), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


# The schema_version table as version 1 created it (a historical format, kept verbatim).
V1_VERSION_TABLE = """CREATE TABLE schema_version (
    version INTEGER NOT NULL, description VARCHAR NOT NULL, applied_at DOUBLE NOT NULL)"""


def v1_store_with_events(db: Path, n: int) -> None:
    """A store as version 1 left it: ``events`` in the main file, no event log."""
    con = duckdb.connect(str(db))
    con.execute(V1_VERSION_TABLE)
    for statement in MIGRATIONS[0].statements:
        con.execute(statement)
    con.execute("INSERT INTO schema_version VALUES (1, 'initial schema', 0)")
    con.execute(
        "INSERT INTO events SELECT i, i, 'call.finished', 'p', 'n' || i, 0, 't', '{}'"
        " FROM range(1, ?) t(i)",
        [n + 1],
    )
    con.close()


class GatedConnection:
    """A connection whose statements starting with ``prefix`` wait for ``gate`` (``entered``
    is set when one does); everything else passes straight through. Holds a writer lane at
    a chosen point, e.g. ``BEGIN`` (inside a batch) or ``CHECKPOINT``."""

    def __init__(self, con: SqlConnection, prefix: str) -> None:
        self._con = con
        self._prefix = prefix
        self.entered = threading.Event()
        self.gate = threading.Event()

    def execute(self, sql: str, *args: Any) -> SqlConnection:
        if sql.startswith(self._prefix):
            self.entered.set()
            self.gate.wait(30)
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def corrupt_a_block_of(db: Path, table: str) -> int:
    """Flip one byte inside a data block that holds ``table``'s rows and no other table's, in
    the closed store file ``db``, as a bad sector or a stray write would: the block's checksum
    no longer matches, which DuckDB finds when a read needs that block (and not before).
    Returns the byte offset flipped."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        size_row = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        assert size_row is not None
        tables = [
            row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        ]
        users: dict[int, set[str]] = {}
        for name in tables:
            blocks = con.execute(
                "SELECT DISTINCT block_id FROM pragma_storage_info(?) WHERE block_id >= 0", [name]
            ).fetchall()
            for (block,) in blocks:
                users.setdefault(int(block), set()).add(name)
    finally:
        con.close()
    own = sorted(block for block, names in users.items() if names == {table})
    assert own, f"no block of {db} holds {table} alone: write more rows to it"
    # past the three file headers, then past the block's own checksum into its data
    offset = 3 * 4096 + own[0] * int(size_row[0]) + 4096
    with db.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    return offset
