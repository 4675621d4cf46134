"""Migrations: versioned, recorded, idempotent; refusals leave the file alone."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from agentconsole.server.store import LATEST_VERSION, TABLES, Store, StoreOpenError
from agentconsole.server.store.schema import MIGRATIONS, current_version, migrate
from tests.server.store.store_helpers import digest


def test_new_file_is_migrated_to_latest_and_version_recorded(db_path: Path) -> None:
    with Store.open(db_path) as store:
        assert store.migration.before == 0
        assert store.migration.after == LATEST_VERSION
        assert store.info.created
        with store.cursor() as cur:
            tables = {
                r[0] for r in cur.execute("SELECT table_name FROM duckdb_tables()").fetchall()
            }
            versions = cur.execute("SELECT version FROM schema_version").fetchall()
    assert set(TABLES) <= tables
    assert versions == [(m.version,) for m in MIGRATIONS]


def test_reopening_applies_nothing_twice(db_path: Path) -> None:
    Store.open(db_path).close()
    with Store.open(db_path) as store:
        assert store.migration.before == store.migration.after == LATEST_VERSION
        assert not store.info.created
        with store.cursor() as cur:
            rows = cur.execute("SELECT count(*) FROM schema_version").fetchone()
    assert rows == (len(MIGRATIONS),)
    con = duckdb.connect(str(db_path))
    try:
        report = migrate(con)
        assert (report.before, report.after) == (LATEST_VERSION, LATEST_VERSION)
        assert current_version(con) == LATEST_VERSION
    finally:
        con.close()


def test_newer_schema_is_refused_and_left_alone(db_path: Path) -> None:
    Store.open(db_path).close()
    con = duckdb.connect(str(db_path))
    con.execute("INSERT INTO schema_version VALUES (99, 'future', 0)")
    con.close()
    before = digest(db_path)
    with pytest.raises(StoreOpenError, match="newer"):
        Store.open(db_path)
    assert digest(db_path) == before


def test_foreign_duckdb_database_is_refused(db_path: Path) -> None:
    con = duckdb.connect(str(db_path))
    con.execute("CREATE TABLE customers (id INTEGER)")
    con.close()
    before = digest(db_path)
    with pytest.raises(StoreOpenError, match="not an agentconsole store"):
        Store.open(db_path)
    assert digest(db_path) == before


def test_events_table_has_no_index_or_constraint(store: Store) -> None:
    with store.cursor() as cur:
        indexes = cur.execute(
            "SELECT count(*) FROM duckdb_indexes() WHERE table_name = 'events'"
        ).fetchone()
        constraints = cur.execute(
            "SELECT constraint_type FROM duckdb_constraints() WHERE table_name = 'events'"
        ).fetchall()
        keyed = cur.execute(
            "SELECT DISTINCT table_name FROM duckdb_constraints()"
            " WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE') ORDER BY 1"
        ).fetchall()
    assert indexes == (0,)
    assert constraints == []
    assert keyed == [("tool_intents",), ("tool_results",)]
