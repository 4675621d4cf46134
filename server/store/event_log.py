"""The event log: the ``events`` table in a DuckDB file of its own, attached to the store.

Why a second file: DuckDB checkpoints a database while holding its checkpoint lock, and every
write transaction of that database waits for it (20-150 ms here). Events are the store's
firehose (tens of thousands a second under load) and fill the WAL quickly, so in one file
their checkpoints stalled the acknowledged writes (tool intents, tool registrations, audit
rows) behind them. Each attached database has its own transaction manager and checkpoint
lock, so with events in ``<name>.events<suffix>`` next to ``<name><suffix>`` those writes
never wait for an event-log checkpoint (``docs/BENCHMARKS.md`` section 6).

The two files are a pair: the main file's ``store_identity`` and the event log's ``owner``
hold the same id, checked at every open, so a stray or swapped event log is refused rather
than mixed in. Schema version 2 moved ``events`` here (:func:`prepare_move`).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.errors import StoreOpenError
from agentconsole.server.store.migration_steps import commit_step
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.tablespec import FLOAT, INT, JSON, STR, TableSpec

#: The alias the event log is attached under; SQL names its table ``event_log.events``.
EVENT_LOG = "event_log"
EVENTS = f"{EVENT_LOG}.events"
#: The schema version from which events live in the event log.
SPLIT_VERSION = 2
#: Rows per row group of the event log (DuckDB's default is 122,880), set at every read-write
#: attach and applying to rows written from then on. A checkpoint that completes a row group
#: compresses all of it while the file's writes wait: at 50 k events/s a default row group
#: stalled them for ~100 ms every 2.5 s, a 16 K one stalls them for 10-35 ms (acknowledged
#: event p99 under that load 148 -> 10 ms, docs/BENCHMARKS.md section 6). Scans of the log
#: are by ``seq`` or time, which finer zone maps serve at least as well.
ROW_GROUP_SIZE = 16_384

#: The events table's columns (written by ``bulk.insert_events``, read by the repository).
EVENT_SPEC = TableSpec(
    "events",
    (
        ("ts", FLOAT),
        ("kind", STR),
        ("program_id", STR),
        ("node_id", STR),
        ("attempt", INT),
        ("tenant", STR),
        ("data", JSON),
    ),
    seq_column="seq",
)
EVENTS_DDL = f"""CREATE TABLE IF NOT EXISTS {EVENTS} (
    seq BIGINT, ts DOUBLE, kind VARCHAR, program_id VARCHAR, node_id VARCHAR,
    attempt INTEGER, tenant VARCHAR, data JSON)"""
_OWNER_DDL = f"CREATE TABLE IF NOT EXISTS {EVENT_LOG}.owner (store_id VARCHAR NOT NULL)"
_IDENTITY_DDL = "CREATE TABLE store_identity (store_id VARCHAR NOT NULL)"
REMEDY = (
    "Both files were left untouched. Put the event log that belongs to this database next "
    "to it, or move both files aside to start a new store"
)


def event_log_path(db_path: Path) -> Path:
    """The event log of the store at ``db_path``: ``x.duckdb`` -> ``x.events.duckdb``."""
    return db_path.with_name(f"{db_path.stem}.events{db_path.suffix}")


def _tables(con: SqlConnection, database: str | None = None) -> set[str]:
    """Tables of the attached ``database``, or of the main file (named after it) if None."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
        " AND database_name = coalesce(?, current_database())",
        [database],
    ).fetchall()
    return {str(r[0]) for r in rows}


def _one(con: SqlConnection, sql: str) -> str | None:
    rows = con.execute(sql).fetchall()  # consumed whole: no transaction left open
    return str(rows[0][0]) if rows else None


def check_pair(con: SqlConnection, db_path: Path, schema_version: int) -> None:
    """Refuse an attached event log that is not this store's (see the module docstring)."""
    path = event_log_path(db_path)
    log_tables = _tables(con, EVENT_LOG)
    owner = _one(con, f"SELECT store_id FROM {EVENT_LOG}.owner") if "owner" in log_tables else None
    identity = (
        _one(con, "SELECT store_id FROM store_identity")
        if "store_identity" in _tables(con)
        else None
    )
    if owner is not None and owner != identity:
        raise StoreOpenError(path, f"the event log belongs to another store ({owner})", REMEDY)
    if owner is None and log_tables:
        raise StoreOpenError(path, "the file is not an agentconsole event log", REMEDY)
    if owner is None and schema_version >= SPLIT_VERSION:
        raise StoreOpenError(path, "the store's event log is empty (replaced?)", REMEDY)


def prepare_move(con: SqlConnection, crash: CrashPoints | None = None) -> None:
    """The cross-file steps of schema version 2, each its own transaction and idempotent.

    DuckDB lets one transaction write to one database only, so the move cannot be atomic;
    instead every step can be repeated after a crash: give the main file an identity, create
    the event log's tables and owner, copy the events not yet copied (by ``seq``). The
    migration's own transaction then drops ``main.events`` and records the version.
    """
    if "store_identity" not in _tables(con):
        commit_step(
            con, crash, [_IDENTITY_DDL, f"INSERT INTO store_identity VALUES ('{uuid.uuid4().hex}')"]
        )
    commit_step(
        con,
        crash,
        [
            EVENTS_DDL,
            _OWNER_DDL,
            f"INSERT INTO {EVENT_LOG}.owner SELECT store_id FROM store_identity"
            f" WHERE NOT EXISTS (SELECT 1 FROM {EVENT_LOG}.owner)",
        ],
    )
    if "events" in _tables(con):
        # every v1 row has a seq (the writer numbers them): copy in order, resumably
        copy = (
            f"INSERT INTO {EVENTS} SELECT * FROM events"
            f" WHERE seq > (SELECT coalesce(max(seq), 0) FROM {EVENTS}) ORDER BY seq"
        )
        commit_step(con, crash, [copy])
