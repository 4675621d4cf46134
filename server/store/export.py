"""Parquet export of every table, from a live store or from a closed database file.

A live store is read through a cursor of its own instance (the file is locked by the serve
process, so no other process could open it). A closed store is opened read-only, its event
log attached read-only: DuckDB then replays leftover WALs in memory and writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from agentconsole.server.store.errors import StoreOpenError
from agentconsole.server.store.event_log import EVENT_LOG, EVENTS, SPLIT_VERSION, event_log_path
from agentconsole.server.store.opening import (
    attach_event_log,
    explain_open_error,
    refuse_foreign,
    refuse_if_open_here,
    refuse_unsafe_paths,
)
from agentconsole.server.store.schema import TABLES, current_version
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.store import Store
from agentconsole.server.store.syncmarks import PROJECTOR


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _present(cur: SqlConnection) -> dict[str, str]:
    """Each store table present, mapped to how SQL names it. ``events`` is the event log's
    from schema version 2 and the main file's before (a crash in the middle of the move
    leaves both, and only the main file's is complete)."""
    rows = cur.execute(
        "SELECT database_name, table_name FROM duckdb_tables()"
        " WHERE database_name IN (current_database(), ?) AND schema_name = 'main'",
        [EVENT_LOG],
    ).fetchall()
    split = current_version(cur) >= SPLIT_VERSION
    present: dict[str, str] = {}
    for database, table in rows:
        if database != EVENT_LOG:
            if not (split and table == "events"):
                present[str(table)] = str(table)
        elif table == "events" and split:
            present["events"] = EVENTS
    return present


def _copy_all(cur: SqlConnection, out_dir: Path) -> list[Path]:
    present = _present(cur)
    written = []
    # one snapshot per file (DuckDB starts each attached file's transaction at its first
    # read; the two files are written by separate transactions anyway)
    cur.execute("BEGIN TRANSACTION")
    try:
        for table in TABLES:
            if table not in present:
                continue
            target = out_dir / f"{table}.parquet"
            source = present[table]
            cur.execute(f"COPY (SELECT * FROM {source}) TO {_quote(target)} (FORMAT parquet)")
            written.append(target)
    finally:
        cur.execute("COMMIT")
    return written


def refuse_rows_behind(cur: SqlConnection, path: Path) -> None:
    """Refuse a closed store whose rows are behind its event log: a server killed (``kill
    -9``, a crash) commits its events within milliseconds and its ``programs``, ``nodes`` and
    ``attempts`` rows about once a second, and only its next start replays the events past
    the rows (``server/live/eventtail.py``). Read as they are, those tables would leave out
    programs, finishes and cancels the server had acknowledged. Raises
    :class:`StoreOpenError` naming the remedy; a store with no mark (before marks existed)
    passes."""
    present = _present(cur)
    if "sync_marks" not in present or "events" not in present:
        return
    (behind,) = cur.execute(
        f"SELECT count(*) FROM {present['events']} WHERE program_id <> '' AND seq >"
        f" (SELECT coalesce(max(seq), 0) FROM sync_marks WHERE name = '{PROJECTOR}')"
    ).fetchone() or (0,)
    if behind:
        raise StoreOpenError(
            path,
            f"its server stopped without writing its last rows ({behind} committed events of"
            " its programs are past them: a crash or kill)",
            f"Start `agentconsole serve --runtime sim --db {path}` once and stop it (Ctrl-C):"
            " the start replays those events into the rows; then run this again",
        )


def export_parquet(
    source: Store | str | os.PathLike[str], out_dir: str | os.PathLike[str]
) -> list[Path]:
    """Write ``<out_dir>/<table>.parquet`` for every store table; return the files written.

    ``source`` is an open :class:`Store` or the path of a closed database file. Creates
    ``out_dir`` if needed and overwrites files of the same names there. Raises
    :class:`StoreOpenError` if a file path is locked by a running server (export through
    it instead), missing or damaged; the database file is never modified.
    """
    out = Path(out_dir)
    if isinstance(source, Store):
        out.mkdir(parents=True, exist_ok=True)
        with source.cursor() as cur:
            return _copy_all(cur, out)
    with read_only(source) as con:  # opened first: a missing or held store makes no folder
        refuse_rows_behind(con, Path(source).absolute())
        out.mkdir(parents=True, exist_ok=True)
        return _copy_all(con, out)


@contextmanager
def read_only(source: str | os.PathLike[str]) -> Iterator[SqlConnection]:
    """A read-only connection to a closed store's file, its event log attached read-only.

    Raises :class:`StoreOpenError` if the file is locked by a running server, missing or
    damaged (DuckDB errors inside the block are explained the same way); nothing is written.
    """
    path = Path(source).absolute()
    refuse_if_open_here(path)  # before any file access: it would drop the server's lock
    if not path.is_file():
        raise StoreOpenError(path, "the file does not exist", "Check the path.")
    refuse_unsafe_paths(path)
    refuse_unsafe_paths(event_log_path(path))
    refuse_foreign((path, event_log_path(path)))
    try:
        con = duckdb.connect(str(path), read_only=True)
    except (duckdb.Error, OSError) as error:
        raise explain_open_error(path, error) from error
    try:
        attach_event_log(con, path, current_version(con), read_only=True)
        yield con
    except duckdb.Error as error:
        raise explain_open_error(path, error) from error
    finally:
        con.close()
