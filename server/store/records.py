"""Current state of programs, nodes and attempts (the event log keeps their history),
and :data:`Record`, every type the writer accepts besides events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentconsole.server.store.catalog import ApiKeyRecord, TenantRecord, ToolRecord
from agentconsole.server.store.idempotency import IdempotencyKeyRecord
from agentconsole.server.store.journal import MetricSample, OperatorAction
from agentconsole.server.store.jsonutil import JSONValue
from agentconsole.server.store.prompt_blocks import PromptBlocksRecord
from agentconsole.server.store.syncmarks import SyncMarkRecord
from agentconsole.server.store.tablespec import (
    FLOAT,
    INT,
    JSON,
    NO_DATA,
    STR,
    STR_LIST,
    TableRecord,
    TableSpec,
)


@dataclass(frozen=True, slots=True)
class ProgramRecord(TableRecord):
    """Current state of one program (the event log keeps its history)."""

    program_id: str
    tenant: str
    state: str
    created_at: float
    updated_at: float
    labels: tuple[str, ...] = ()
    finished_at: float | None = None
    deadline: float | None = None
    data: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)


ProgramRecord.SPEC = TableSpec(
    "programs",
    (
        ("program_id", STR),
        ("tenant", STR),
        ("state", STR),
        ("labels", STR_LIST),
        ("created_at", FLOAT),
        ("updated_at", FLOAT),
        ("finished_at", FLOAT),
        ("deadline", FLOAT),
        ("data", JSON),
    ),
    key=("program_id",),
)


@dataclass(frozen=True, slots=True)
class NodeRecord(TableRecord):
    """Current state of one node of a program's DAG."""

    program_id: str
    node_id: str
    kind: str
    state: str
    created_at: float
    updated_at: float
    parents: tuple[str, ...] = ()
    attempt: int = 0
    data: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)


NodeRecord.SPEC = TableSpec(
    "nodes",
    (
        ("program_id", STR),
        ("node_id", STR),
        ("kind", STR),
        ("state", STR),
        ("parents", STR_LIST),
        ("attempt", INT),
        ("created_at", FLOAT),
        ("updated_at", FLOAT),
        ("data", JSON),
    ),
    key=("program_id", "node_id"),
)


@dataclass(frozen=True, slots=True)
class AttemptRecord(TableRecord):
    """One attempt (try) of a node: LLM call or tool execution."""

    program_id: str
    node_id: str
    attempt: int
    state: str
    started_at: float
    finished_at: float | None = None
    data: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)


AttemptRecord.SPEC = TableSpec(
    "attempts",
    (
        ("program_id", STR),
        ("node_id", STR),
        ("attempt", INT),
        ("state", STR),
        ("started_at", FLOAT),
        ("finished_at", FLOAT),
        ("data", JSON),
    ),
    key=("program_id", "node_id", "attempt"),
)


Record = (
    ProgramRecord
    | NodeRecord
    | AttemptRecord
    | TenantRecord
    | ApiKeyRecord
    | ToolRecord
    | OperatorAction
    | MetricSample
    | PromptBlocksRecord
    | SyncMarkRecord
    | IdempotencyKeyRecord
)

#: Tables whose rows the writer numbers (``TableSpec.seq_column``), besides ``events``.
NUMBERED_SPECS = (OperatorAction.SPEC,)
