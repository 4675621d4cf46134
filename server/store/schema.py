"""The store's tables and their versioned, idempotent migrations.

Migrations run once at start-up, each in its own transaction together with its
``schema_version`` row, and the caller checkpoints right after: DDL never sits in the WAL
while the server runs, because WAL replay of DDL is where DuckDB's crash-recovery bugs
cluster. Only the two small tool tables carry a primary key (the claim needs a unique key);
``events`` has no index and no constraint at all (the writer numbers ``seq``); from version 2
it lives in the event log file (:mod:`event_log`), attached before :func:`migrate` runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.event_log import SPLIT_VERSION, prepare_move
from agentconsole.server.store.idempotency import MIGRATION_DDL as IDEMPOTENCY_KEYS_DDL
from agentconsole.server.store.migration_steps import commit_step
from agentconsole.server.store.prompt_blocks import MIGRATION_DDL as PROMPT_BLOCKS_DDL
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.syncmarks import MIGRATION_DDL as SYNC_MARKS_DDL

_V1 = (
    """CREATE TABLE tenants (
        tenant VARCHAR NOT NULL, display_name VARCHAR NOT NULL, weight DOUBLE NOT NULL,
        quotas JSON NOT NULL, created_at DOUBLE NOT NULL, updated_at DOUBLE NOT NULL)""",
    """CREATE TABLE api_keys (
        key_id VARCHAR NOT NULL, tenant VARCHAR NOT NULL, key_hash VARCHAR NOT NULL,
        role VARCHAR NOT NULL, created_at DOUBLE NOT NULL, revoked_at DOUBLE)""",
    """CREATE TABLE programs (
        program_id VARCHAR NOT NULL, tenant VARCHAR NOT NULL, state VARCHAR NOT NULL,
        labels VARCHAR[] NOT NULL, created_at DOUBLE NOT NULL, updated_at DOUBLE NOT NULL,
        finished_at DOUBLE, deadline DOUBLE, data JSON NOT NULL)""",
    """CREATE TABLE nodes (
        program_id VARCHAR NOT NULL, node_id VARCHAR NOT NULL, kind VARCHAR NOT NULL,
        state VARCHAR NOT NULL, parents VARCHAR[] NOT NULL, attempt INTEGER NOT NULL,
        created_at DOUBLE NOT NULL, updated_at DOUBLE NOT NULL, data JSON NOT NULL)""",
    """CREATE TABLE attempts (
        program_id VARCHAR NOT NULL, node_id VARCHAR NOT NULL, attempt INTEGER NOT NULL,
        state VARCHAR NOT NULL, started_at DOUBLE NOT NULL, finished_at DOUBLE,
        data JSON NOT NULL)""",
    """CREATE TABLE events (
        seq BIGINT, ts DOUBLE, kind VARCHAR, program_id VARCHAR, node_id VARCHAR,
        attempt INTEGER, tenant VARCHAR, data JSON)""",
    """CREATE TABLE tool_intents (
        tool_call_id VARCHAR PRIMARY KEY, params_hash VARCHAR NOT NULL,
        program_id VARCHAR NOT NULL, node_id VARCHAR NOT NULL, tool VARCHAR NOT NULL,
        side_effect BOOLEAN NOT NULL, idempotent BOOLEAN NOT NULL, state VARCHAR NOT NULL,
        epoch INTEGER NOT NULL, created_at DOUBLE NOT NULL, updated_at DOUBLE NOT NULL,
        error VARCHAR)""",
    """CREATE TABLE tool_results (
        tool_call_id VARCHAR PRIMARY KEY, epoch INTEGER NOT NULL, result JSON NOT NULL,
        committed_at DOUBLE NOT NULL)""",
    """CREATE TABLE operator_actions (
        action_id BIGINT NOT NULL, ts DOUBLE NOT NULL, actor VARCHAR NOT NULL,
        action VARCHAR NOT NULL, target VARCHAR NOT NULL, args JSON NOT NULL,
        result VARCHAR NOT NULL)""",
    """CREATE TABLE metric_snapshots (
        ts DOUBLE NOT NULL, name VARCHAR NOT NULL, labels JSON NOT NULL, value DOUBLE)""",
    """CREATE TABLE tools (
        name VARCHAR NOT NULL, tenant VARCHAR NOT NULL, json_schema JSON NOT NULL,
        side_effect BOOLEAN NOT NULL, idempotent BOOLEAN NOT NULL, timeout_s DOUBLE NOT NULL,
        permissions VARCHAR[] NOT NULL, flags JSON NOT NULL, created_at DOUBLE NOT NULL,
        updated_at DOUBLE NOT NULL)""",
)

_VERSION_TABLE = """CREATE TABLE schema_version (
    version INTEGER NOT NULL, description VARCHAR NOT NULL, applied_at DOUBLE NOT NULL)"""


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step: its version, a description and the statements it runs in one
    transaction of the main file, after ``prepare`` (idempotent steps in other files)."""

    version: int
    description: str
    statements: tuple[str, ...]
    prepare: Callable[[SqlConnection, CrashPoints | None], None] | None = None


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _V1),
    Migration(
        SPLIT_VERSION,
        "events move to the event log file",
        ("DROP TABLE IF EXISTS events",),
        prepare=prepare_move,
    ),
    Migration(
        SPLIT_VERSION + 1,
        "tool call arguments, kept as each tenant's redaction says",
        ("ALTER TABLE tool_intents ADD COLUMN arguments JSON",),
    ),
    Migration(
        SPLIT_VERSION + 2,
        "prompt structure: salted block hashes of every LLM call, and their secret",
        PROMPT_BLOCKS_DDL,
    ),
    Migration(
        SPLIT_VERSION + 3,
        "sync marks: how far the projected rows reflect the event log",
        SYNC_MARKS_DDL,
    ),
    Migration(
        SPLIT_VERSION + 4,
        "idempotency keys: the program each tenant's keyed create opened",
        IDEMPOTENCY_KEYS_DDL,
    ),
)
LATEST_VERSION = MIGRATIONS[-1].version

#: Every table the store owns, in export order (``events`` is ``event_log.events`` from v2).
TABLES: tuple[str, ...] = (
    "schema_version",
    "store_identity",
    "tenants",
    "api_keys",
    "programs",
    "nodes",
    "attempts",
    "events",
    "tool_intents",
    "tool_results",
    "operator_actions",
    "metric_snapshots",
    "tools",
    "prompt_blocks",
    "sync_marks",
    "idempotency_keys",
)


class SchemaError(Exception):
    """The database's schema cannot be brought to :data:`LATEST_VERSION` by this build."""


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """Schema version found at open (0: a new file) and the version after migrating."""

    before: int
    after: int


def _table_names(con: SqlConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
        " AND schema_name = 'main'"
    ).fetchall()
    return {str(r[0]) for r in rows}


def current_version(con: SqlConnection) -> int:
    """The highest applied migration, 0 for a database without ``schema_version``."""
    if "schema_version" not in _table_names(con):
        return 0
    row = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def migratable_version(con: SqlConnection) -> int:
    """The schema version of ``con``'s database; raises :class:`SchemaError` if this build
    cannot migrate it (written by a newer build, or not an agentconsole store at all)."""
    tables = _table_names(con)
    before = current_version(con)
    if before > LATEST_VERSION:
        raise SchemaError(f"schema version {before} is newer than this build's {LATEST_VERSION}")
    if before == 0 and tables:
        raise SchemaError(
            f"the database has tables ({', '.join(sorted(tables)[:5])}) but no "
            "schema_version: it is not an agentconsole store"
        )
    return before


def migrate(con: SqlConnection, crash: CrashPoints | None = None) -> MigrationReport:
    """Apply every pending migration; a no-op (no statement written) when up to date.

    Requires exclusive use of ``con``, no open transaction, and the event log attached
    (:func:`~agentconsole.server.store.opening.attach_event_log`). Raises :class:`SchemaError`
    if the file was written by a newer build, or is a DuckDB database this project did not
    create (tables but no ``schema_version``); nothing is changed in either case. A failing
    migration is rolled back whole, with its version row.
    """
    before = migratable_version(con)
    for migration in MIGRATIONS:
        if migration.version <= before:
            continue
        if migration.prepare is not None:
            migration.prepare(con, crash)
        version_row = (
            "INSERT INTO schema_version VALUES (?, ?, ?)",
            [migration.version, migration.description, time.time()],
        )
        first = [_VERSION_TABLE] if migration.version == 1 else []
        commit_step(con, crash, [*first, *migration.statements, version_row])
    return MigrationReport(before=before, after=max(before, LATEST_VERSION))
