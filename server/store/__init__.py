"""The DuckDB store: schema and migrations, the single group-committing writer, the read
repository, durable tool-call intents, safe open/close and Parquet export.

Only the ``serve`` process opens the database file, read-write, through :meth:`Store.open`.
"""

from __future__ import annotations

from agentconsole.server.store.catalog import ApiKeyRecord, TenantRecord, ToolRecord
from agentconsole.server.store.config import StoreConfig
from agentconsole.server.store.errors import (
    StoreClosedError,
    StoreDamagedError,
    StoreError,
    StoreOpenError,
)
from agentconsole.server.store.export import export_parquet
from agentconsole.server.store.intent_types import (
    Claim,
    ClaimStatus,
    CommitOutcome,
    IntentRecord,
    IntentState,
    RecoveryReport,
)
from agentconsole.server.store.intents import ToolIntents, make_tool_call_id, params_hash
from agentconsole.server.store.journal import MetricSample, OperatorAction
from agentconsole.server.store.records import AttemptRecord, NodeRecord, ProgramRecord, Record
from agentconsole.server.store.repository import (
    ProgramView,
    Repository,
    StoredAction,
    StoredEvent,
)
from agentconsole.server.store.schema import LATEST_VERSION, TABLES
from agentconsole.server.store.stats import WriterStats
from agentconsole.server.store.store import Store
from agentconsole.server.store.writer import StoreWriter

__all__ = [
    "LATEST_VERSION",
    "TABLES",
    "ApiKeyRecord",
    "AttemptRecord",
    "Claim",
    "ClaimStatus",
    "CommitOutcome",
    "IntentRecord",
    "IntentState",
    "MetricSample",
    "NodeRecord",
    "OperatorAction",
    "ProgramRecord",
    "ProgramView",
    "Record",
    "RecoveryReport",
    "Repository",
    "Store",
    "StoreClosedError",
    "StoreConfig",
    "StoreDamagedError",
    "StoreError",
    "StoreOpenError",
    "StoreWriter",
    "StoredAction",
    "StoredEvent",
    "TenantRecord",
    "ToolIntents",
    "ToolRecord",
    "WriterStats",
    "export_parquet",
    "make_tool_call_id",
    "params_hash",
]
