"""Current state of programs, nodes and attempts (the event log keeps their history),
and :data:`Record`, every type the writer accepts besides events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentconsole.server.store.catalog import ApiKeyRecord, TenantRecord, ToolRecord
from agentconsole.server.store.journal import MetricSample, OperatorAction
from agentconsole.server.store.jsonutil import JSONValue, dumps, loads_object
from agentconsole.server.store.tablespec import (
    FLOAT,
    INT,
    NO_DATA,
    STR,
    STR_LIST,
    TableSpec,
    opt_float,
)


@dataclass(frozen=True, slots=True)
class ProgramRecord:
    """Current state of one program (the event log keeps its history)."""

    SPEC: ClassVar[TableSpec]
    program_id: str
    tenant: str
    state: str
    created_at: float
    updated_at: float
    labels: tuple[str, ...] = ()
    finished_at: float | None = None
    deadline: float | None = None
    data: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)

    def row(self) -> tuple[object, ...]:
        """Values in ``SPEC.columns`` order."""
        return (
            self.program_id,
            self.tenant,
            self.state,
            list(self.labels),
            self.created_at,
            self.updated_at,
            self.finished_at,
            self.deadline,
            dumps(self.data),
        )

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> ProgramRecord:
        """Inverse of :meth:`row` for a ``SELECT`` of ``SPEC.names``."""
        return cls(
            program_id=r[0],
            tenant=r[1],
            state=r[2],
            labels=tuple(r[3] or ()),
            created_at=r[4],
            updated_at=r[5],
            finished_at=opt_float(r[6]),
            deadline=opt_float(r[7]),
            data=loads_object(r[8]),
        )


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
        ("data", STR),
    ),
    key=("program_id",),
)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """Current state of one node of a program's DAG."""

    SPEC: ClassVar[TableSpec]
    program_id: str
    node_id: str
    kind: str
    state: str
    created_at: float
    updated_at: float
    parents: tuple[str, ...] = ()
    attempt: int = 0
    data: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)

    def row(self) -> tuple[object, ...]:
        """Values in ``SPEC.columns`` order."""
        return (
            self.program_id,
            self.node_id,
            self.kind,
            self.state,
            list(self.parents),
            self.attempt,
            self.created_at,
            self.updated_at,
            dumps(self.data),
        )

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> NodeRecord:
        """Inverse of :meth:`row`."""
        return cls(
            program_id=r[0],
            node_id=r[1],
            kind=r[2],
            state=r[3],
            parents=tuple(r[4] or ()),
            attempt=r[5],
            created_at=r[6],
            updated_at=r[7],
            data=loads_object(r[8]),
        )


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
        ("data", STR),
    ),
    key=("program_id", "node_id"),
)


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt (try) of a node: LLM call or tool execution."""

    SPEC: ClassVar[TableSpec]
    program_id: str
    node_id: str
    attempt: int
    state: str
    started_at: float
    finished_at: float | None = None
    data: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)

    def row(self) -> tuple[object, ...]:
        """Values in ``SPEC.columns`` order."""
        return (
            self.program_id,
            self.node_id,
            self.attempt,
            self.state,
            self.started_at,
            self.finished_at,
            dumps(self.data),
        )

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> AttemptRecord:
        """Inverse of :meth:`row`."""
        return cls(
            program_id=r[0],
            node_id=r[1],
            attempt=r[2],
            state=r[3],
            started_at=r[4],
            finished_at=opt_float(r[5]),
            data=loads_object(r[6]),
        )


AttemptRecord.SPEC = TableSpec(
    "attempts",
    (
        ("program_id", STR),
        ("node_id", STR),
        ("attempt", INT),
        ("state", STR),
        ("started_at", FLOAT),
        ("finished_at", FLOAT),
        ("data", STR),
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
)

#: Tables whose rows the writer numbers (``TableSpec.seq_column``), besides ``events``.
NUMBERED_SPECS = (OperatorAction.SPEC,)
