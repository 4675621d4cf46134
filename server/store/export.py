"""Parquet export of every table, from a live store or from a closed database file.

A live store is read through a cursor of its own instance (the file is locked by the serve
process, so no other process could open it). A closed file is opened read-only: DuckDB then
replays a leftover WAL in memory and writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from agentconsole.server.store.errors import StoreOpenError
from agentconsole.server.store.opening import explain_open_error, refuse_unsafe_paths
from agentconsole.server.store.schema import TABLES
from agentconsole.server.store.store import Store


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _copy_all(cur: duckdb.DuckDBPyConnection, out_dir: Path) -> list[Path]:
    present = {
        str(r[0])
        for r in cur.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
        ).fetchall()
    }
    written = []
    cur.execute("BEGIN TRANSACTION")  # one snapshot for every table
    try:
        for table in TABLES:
            if table not in present:
                continue
            target = out_dir / f"{table}.parquet"
            cur.execute(f"COPY (SELECT * FROM {table}) TO {_quote(target)} (FORMAT parquet)")
            written.append(target)
    finally:
        cur.execute("COMMIT")
    return written


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
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(source, Store):
        with source.cursor() as cur:
            return _copy_all(cur, out)
    path = Path(source).absolute()
    if not path.is_file():
        raise StoreOpenError(path, "the file does not exist", "Check the path.")
    refuse_unsafe_paths(path)
    try:
        con = duckdb.connect(str(path), read_only=True)
    except (duckdb.Error, OSError) as error:
        raise explain_open_error(path, error) from error
    try:
        return _copy_all(con, out)
    finally:
        con.close()
