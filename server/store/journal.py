"""Append-only rows: the operator audit trail and metric snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentconsole.server.store.jsonutil import JSONValue
from agentconsole.server.store.tablespec import FLOAT, JSON, NO_DATA, STR, TableRecord, TableSpec


@dataclass(frozen=True, slots=True)
class OperatorAction(TableRecord):
    """One audited operator action (append-only; the writer numbers it ``action_id``)."""

    ts: float
    actor: str
    action: str
    target: str
    result: str
    args: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)


OperatorAction.SPEC = TableSpec(
    "operator_actions",
    (
        ("ts", FLOAT),
        ("actor", STR),
        ("action", STR),
        ("target", STR),
        ("args", JSON),
        ("result", STR),
    ),
    seq_column="action_id",
)


@dataclass(frozen=True, slots=True)
class MetricSample(TableRecord):
    """One sampled metric value (append-only snapshots for history charts)."""

    ts: float
    name: str
    value: float
    labels: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)


MetricSample.SPEC = TableSpec(
    "metric_snapshots", (("ts", FLOAT), ("name", STR), ("labels", JSON), ("value", FLOAT))
)
