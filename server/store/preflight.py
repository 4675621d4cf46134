"""Read-only checks of the database file and its WAL before the read-write open.

Two gaps in DuckDB 2.0.1's own checks, both found on this project's machine:

* A WAL whose header DuckDB cannot read, or whose database identifier differs from the
  file's, is silently ignored, then overwritten and deleted: its transactions are lost
  without a word. :func:`wal_problem` refuses such a WAL instead.
* A database file truncated past its metadata opens without error; only a later read of a
  missing block fails, after the read-write open has already checkpointed into the damaged
  file. :func:`missing_blocks` compares the blocks the tables refer to with the file size.

The layouts were verified for :data:`VERIFIED_VERSIONS`; under another DuckDB version both
checks are skipped (DuckDB's own checksums still apply) rather than guessing at a format.
Nothing here writes, and both run before the store's own connection exists: once it does,
this process must not open() the database file at all, because closing *any* descriptor of
it drops DuckDB's POSIX record lock and lets a second process open the file read-write.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from agentconsole.server.store.sqlconn import SqlConnection

VERIFIED_VERSIONS = frozenset({"2.0.1"})
_WAL_TYPE_FIELD = 100
_WAL_VERSION_ENTRY = 98
_VERSION_FIELD = 101
_IDENTIFIER_FIELD = 102
_DB_MAGIC = b"DUCK"
_DB_MAGIC_AT = 8
_DB_IDENTIFIER_AT = 124
_IDENTIFIER_LEN = 16
#: Main header plus the two alternating database headers precede the first block.
_FILE_HEADERS = 3 * 4096


class _Torn(Exception):
    """The header ends early: a crash while it was first written (nothing committed yet)."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def field(self) -> int:
        if self.pos + 2 > len(self.data):
            raise _Torn
        value = int.from_bytes(self.data[self.pos : self.pos + 2], "little")
        self.pos += 2
        return value

    def varint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise _Torn
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value
            if shift > 63:
                raise ValueError("varint too long")


def wal_path(db_path: Path) -> Path:
    """Where DuckDB keeps the write-ahead log of ``db_path``."""
    return db_path.with_name(db_path.name + ".wal")


def wal_problem(db_path: Path) -> str | None:
    """Why the WAL next to ``db_path`` must not be handed to DuckDB, or ``None`` if it may.

    ``None`` also when there is no WAL, an empty one, a header torn by a crash before any
    commit, or a DuckDB version whose layout was not verified.
    """
    wal = wal_path(db_path)
    if duckdb.__version__ not in VERIFIED_VERSIONS or not wal.is_file():
        return None
    with wal.open("rb") as f:
        head = f.read(128)
    if not head:
        return None
    if not db_path.is_file():
        return f"the write-ahead log {wal} exists but its database file does not"
    reader = _Reader(head)
    try:
        if reader.field() != _WAL_TYPE_FIELD or reader.varint() != _WAL_VERSION_ENTRY:
            return f"the write-ahead log {wal} does not start with a DuckDB WAL header"
        if reader.field() != _VERSION_FIELD:
            return f"the write-ahead log {wal} has an unreadable header"
        reader.varint()
        if reader.field() != _IDENTIFIER_FIELD:
            return f"the write-ahead log {wal} has an unreadable header"
        count = reader.varint()
        identifier = bytes(reader.varint() & 0xFF for _ in range(count))
    except _Torn:
        return None
    except ValueError:
        return f"the write-ahead log {wal} has an unreadable header"
    with db_path.open("rb") as f:
        db_head = f.read(_DB_IDENTIFIER_AT + _IDENTIFIER_LEN)
    if db_head[_DB_MAGIC_AT : _DB_MAGIC_AT + 4] != _DB_MAGIC:
        return None  # not a DuckDB file at all: DuckDB's own open error says so
    expected = db_head[_DB_IDENTIFIER_AT : _DB_IDENTIFIER_AT + _IDENTIFIER_LEN]
    if identifier != expected:
        return (
            f"the write-ahead log {wal} belongs to a different database than {db_path} "
            "(DuckDB would silently discard it)"
        )
    return None


def missing_blocks(con: SqlConnection, db_path: Path) -> str | None:
    """Why the tables of ``con`` (a read-only probe of ``db_path``) cannot all be read, or
    ``None``: a table segment lies in a block past the end of the file (truncation).

    Reads only metadata (``pragma_storage_info``), not the data blocks themselves.
    """
    if duckdb.__version__ not in VERIFIED_VERSIONS:
        return None
    size_row = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    tables = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
    ).fetchall()
    if size_row is None or not tables:
        return None
    present = (db_path.stat().st_size - _FILE_HEADERS) // int(size_row[0])
    for (table,) in tables:
        row = con.execute(
            "SELECT coalesce(max(block_id), -1) FROM pragma_storage_info(?)", [table]
        ).fetchone()
        needed = int(row[0]) if row else -1
        if needed >= present:
            return (
                f"the database file is truncated: table {table} needs block {needed} but the "
                f"file holds only {present} blocks"
            )
    return None
