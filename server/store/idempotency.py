"""Idempotency keys of ``POST /v1/programs``: which program a tenant's key opened, and for
what body.

One row per create that carried ``Idempotency-Key``, appended when its program opens and
committed with the program's creation (the create's answer waits for both lanes' commit,
``server/api/programs.py``), so a retry after a restart finds it. The program's own creation
is its ``program.created`` event, in the event log file: the two commit in separate files, so a
crash between the two commits can leave a key whose program never committed, which the
create's retry treats as unknown (its program opens then, and a newer row for the key is
appended: the newest row of a key is the one that counts). The other way round (the program
committed, not its key) the retry is a create without a key (409 for a named id, another
program for a server-chosen one). Either way the first attempt was never answered 201.

A row lives as long as the store keeps its program's rows: nothing deletes program rows today,
and whatever comes to delete them (a retention of stored programs) should delete its keys with
them (``program_id``), since a key's answer is its program.

No index (as every table but the two tool tables): the rows are appended, never updated, and a
key is read only when the server's filter of stored keys cannot rule it out
(``server/api/createkeys.py``), so most creates read nothing here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.tablespec import FLOAT, STR, TableRecord, TableSpec


@dataclass(frozen=True, slots=True)
class IdempotencyKeyRecord(TableRecord):
    """``tenant``'s create with ``idempotency_key`` opened ``program_id``; its body's digest is
    ``request_sha256`` (a retry must repeat the body)."""

    tenant: str
    idempotency_key: str
    program_id: str
    request_sha256: str
    created_at: float


IdempotencyKeyRecord.SPEC = TableSpec(
    "idempotency_keys",
    (
        ("tenant", STR),
        ("idempotency_key", STR),
        ("program_id", STR),
        ("request_sha256", STR),
        ("created_at", FLOAT),
    ),
)

#: The migration's statements (frozen history: never derived from the spec above).
MIGRATION_DDL = (
    """CREATE TABLE idempotency_keys (
        tenant VARCHAR NOT NULL, idempotency_key VARCHAR NOT NULL, program_id VARCHAR NOT NULL,
        request_sha256 VARCHAR NOT NULL, created_at DOUBLE NOT NULL)""",
)

_COLUMNS = ", ".join(IdempotencyKeyRecord.SPEC.names)


def key_name(tenant: str, idempotency_key: str) -> str:
    """One text for a tenant's key (a key is visible ASCII, so the NUL cannot be in it and the
    pair is read back unambiguously)."""
    return f"{tenant}\0{idempotency_key}"


def stored_key(
    cur: SqlConnection, tenant: str, idempotency_key: str
) -> IdempotencyKeyRecord | None:
    """The newest row of ``tenant``'s ``idempotency_key``, or None."""
    rows = cur.execute(
        f"SELECT {_COLUMNS} FROM idempotency_keys WHERE tenant = ? AND idempotency_key = ?"
        " ORDER BY created_at DESC LIMIT 1",
        [tenant, idempotency_key],
    ).fetchall()
    return IdempotencyKeyRecord.from_row(rows[0]) if rows else None


def stored_key_names(cur: SqlConnection, chunk: int = 10_000) -> Iterator[str]:
    """:func:`key_name` of every stored key, read ``chunk`` rows at a time."""
    cur.execute("SELECT tenant, idempotency_key FROM idempotency_keys")
    while rows := cur.fetchmany(chunk):
        yield from (key_name(str(tenant), str(key)) for tenant, key in rows)
