"""Append-only rows: the operator audit trail and metric snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentconsole.server.store.jsonutil import JSONValue, dumps, loads_object
from agentconsole.server.store.tablespec import FLOAT, NO_DATA, STR, TableSpec


@dataclass(frozen=True, slots=True)
class OperatorAction:
    """One audited operator action (append-only; the writer numbers it ``action_id``)."""

    SPEC: ClassVar[TableSpec]
    ts: float
    actor: str
    action: str
    target: str
    result: str
    args: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)

    def row(self) -> tuple[object, ...]:
        """Values in ``SPEC.columns`` order (without ``action_id``)."""
        return (self.ts, self.actor, self.action, self.target, dumps(self.args), self.result)

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> OperatorAction:
        """Inverse of :meth:`row`."""
        return cls(
            ts=r[0], actor=r[1], action=r[2], target=r[3], args=loads_object(r[4]), result=r[5]
        )


OperatorAction.SPEC = TableSpec(
    "operator_actions",
    (
        ("ts", FLOAT),
        ("actor", STR),
        ("action", STR),
        ("target", STR),
        ("args", STR),
        ("result", STR),
    ),
    seq_column="action_id",
)


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One sampled metric value (append-only snapshots for history charts)."""

    SPEC: ClassVar[TableSpec]
    ts: float
    name: str
    value: float
    labels: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)

    def row(self) -> tuple[object, ...]:
        """Values in ``SPEC.columns`` order."""
        return (self.ts, self.name, dumps(self.labels), self.value)

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> MetricSample:
        """Inverse of :meth:`row`."""
        return cls(ts=r[0], name=r[1], labels=loads_object(r[2]), value=r[3])


MetricSample.SPEC = TableSpec(
    "metric_snapshots", (("ts", FLOAT), ("name", STR), ("labels", STR), ("value", FLOAT))
)
