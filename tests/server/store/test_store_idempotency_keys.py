"""The ``idempotency_keys`` table: its rows are read back by tenant and key (the newest row of a
key counts), listed for the server's filter of stored keys, and a store written by the build
before it (schema the version before, programs already in it) gains the table when it opens."""

from __future__ import annotations

from pathlib import Path

import duckdb

from agentconsole.server.store import LATEST_VERSION, ProgramRecord, Store
from agentconsole.server.store.idempotency import (
    MIGRATION_DDL,
    IdempotencyKeyRecord,
    key_name,
    stored_key,
    stored_key_names,
)
from agentconsole.server.store.schema import MIGRATIONS

#: the schema version that added the table
KEYS_VERSION = next(m.version for m in MIGRATIONS if m.statements == MIGRATION_DDL)


def _key(tenant: str, key: str, program_id: str, at: float) -> IdempotencyKeyRecord:
    return IdempotencyKeyRecord(tenant, key, program_id, f"sha-{program_id}", at)


def test_a_key_is_read_back_per_tenant_the_newest_row_first(store: Store) -> None:
    for record in (
        _key("a", "k1", "p1", 1.0),
        _key("b", "k1", "p2", 2.0),  # another tenant's same key
        _key("a", "k1", "p3", 3.0),  # a newer row of a's key (its first program never was)
        _key("a", "k2", "p4", 4.0),
    ):
        store.writer.put(record)
    store.writer.flush().result(10)
    with store.cursor() as cur:
        assert stored_key(cur, "a", "k1") == _key("a", "k1", "p3", 3.0)
        assert stored_key(cur, "b", "k1") == _key("b", "k1", "p2", 2.0)
        assert stored_key(cur, "b", "k2") is None
        assert stored_key(cur, "c", "k1") is None
        names = sorted(stored_key_names(cur, chunk=2))
    assert names == sorted([key_name("a", "k1")] * 2 + [key_name("b", "k1"), key_name("a", "k2")])


def test_a_store_of_the_previous_version_gains_the_table(db_path: Path) -> None:
    with Store.open(db_path) as store:
        store.writer.put_durable(ProgramRecord("p1", "a", "running", 1.0, 1.0)).result(10)
    # the file as the build before this table left it: no table, no version row
    con = duckdb.connect(str(db_path))
    con.execute("DROP TABLE idempotency_keys")
    con.execute("DELETE FROM schema_version WHERE version = ?", [KEYS_VERSION])
    con.close()
    with Store.open(db_path) as store:
        assert (store.migration.before, store.migration.after) == (KEYS_VERSION - 1, LATEST_VERSION)
        assert store.repo.program_owner("p1") == "a"  # what it held is kept
        store.writer.put_durable(_key("a", "k", "p1", 5.0)).result(10)
        with store.cursor() as cur:
            assert stored_key(cur, "a", "k") == _key("a", "k", "p1", 5.0)
            versions = cur.execute("SELECT max(version) FROM schema_version").fetchone()
    assert versions == (LATEST_VERSION,)
