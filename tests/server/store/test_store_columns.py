"""The store schema is declared once per table: the spec the code reads and writes it by.

Migrations are frozen history (their DDL is never generated from the specs, which change), so
these tests keep the two in step: every table of a migrated store, new or upgraded from
version 1, has the columns of its spec, by name, DuckDB type and order.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from agentconsole.server.store import TABLES, Store
from agentconsole.server.store.bulk import events_table
from agentconsole.server.store.event_log import EVENT_LOG, EVENT_SPEC
from agentconsole.server.store.intent_types import TOOL_RESULTS, IntentRecord
from agentconsole.server.store.records import Record
from agentconsole.server.store.tablespec import TableSpec
from tests.server.store.store_helpers import v1_store_with_events

#: Every table whose rows the code reads or writes by name: the record types the writer takes,
#: the tool-intent tables and the event log.
SPECS: tuple[TableSpec, ...] = (
    *(record.SPEC for record in get_args(Record)),
    IntentRecord.SPEC,
    TOOL_RESULTS,
    EVENT_SPEC,
)
#: Migration bookkeeping, made and read by the migrations' own statements only.
BOOKKEEPING = {"schema_version", "store_identity"}


def test_every_table_has_one_spec() -> None:
    tables = [spec.table for spec in SPECS]
    assert len(tables) == len(set(tables))
    assert set(tables) | BOOKKEEPING == set(TABLES)


@pytest.fixture(params=["new", "upgraded from v1"])
def migrated(request: pytest.FixtureRequest, db_path: Path) -> Path:
    """A store file migrated to the latest version (its path; the store is closed)."""
    if request.param != "new":
        v1_store_with_events(db_path, 3)
    Store.open(db_path).close()
    return db_path


def _columns(db_path: Path, table: str) -> list[tuple[str, str]]:
    database = EVENT_LOG if table == "events" else db_path.stem
    with Store.open(db_path) as store, store.cursor() as cur:
        rows = cur.execute(
            "SELECT column_name, data_type FROM duckdb_columns()"
            " WHERE database_name = ? AND schema_name = 'main' AND table_name = ?"
            " ORDER BY column_index",
            [database, table],
        ).fetchall()
    return [(str(name), str(kind)) for name, kind in rows]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.table)
def test_each_table_has_its_specs_columns(migrated: Path, spec: TableSpec) -> None:
    expected = [(name, kind.sql) for name, kind in spec.table_columns]
    assert _columns(migrated, spec.table) == expected


def test_the_event_batches_have_the_specs_arrow_types() -> None:
    schema = events_table([], 1).schema
    assert [(f.name, f.type) for f in schema] == [
        (name, kind.arrow) for name, kind in EVENT_SPEC.table_columns
    ]
