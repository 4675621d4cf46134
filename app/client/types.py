"""Typed results of the API: frozen dataclasses with the fields clients use most, and
``raw`` (the whole JSON object) for everything else. Parsing is lenient: a field the server
leaves out gets its neutral value, so an older or newer server still decodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

JSON = dict[str, Any]


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _num(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _opt_num(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _strs(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key)
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


@dataclass(frozen=True, slots=True)
class Node:
    """One LLM or tool call of a program."""

    node_id: str
    kind: str
    state: str
    parents: tuple[str, ...] = ()
    branch: str = "main"
    tool: str | None = None
    attempts: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    raw: JSON = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Node:
        return cls(
            node_id=_str(data, "node_id"),
            kind=_str(data, "kind"),
            state=_str(data, "state"),
            parents=_strs(data, "parents"),
            branch=_str(data, "branch") or "main",
            tool=_opt_str(data, "tool"),
            attempts=_int(data, "attempts"),
            prompt_tokens=_int(data, "prompt_tokens"),
            cached_tokens=_int(data, "cached_tokens"),
            output_tokens=_int(data, "output_tokens"),
            raw=dict(data),
        )


@dataclass(frozen=True, slots=True)
class Program:
    """A program (a summary from a listing has no ``nodes``)."""

    program_id: str
    tenant: str
    state: str
    created_at: float = 0.0
    finished_at: float | None = None
    deadline: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    nodes_done: int = 0
    nodes_known: int = 0
    tokens_used: int = 0
    tool_calls: int = 0
    nodes: tuple[Node, ...] = ()
    critical_path: tuple[str, ...] = ()
    raw: JSON = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Program:
        labels = data.get("labels")
        nodes = data.get("nodes")
        return cls(
            program_id=_str(data, "program_id"),
            tenant=_str(data, "tenant"),
            state=_str(data, "state"),
            created_at=_num(data, "created_at"),
            finished_at=_opt_num(data, "finished_at"),
            deadline=_opt_num(data, "deadline"),
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
            nodes_done=_int(data, "nodes_done"),
            nodes_known=_int(data, "nodes_known"),
            tokens_used=_int(data, "tokens_used"),
            tool_calls=_int(data, "tool_calls"),
            nodes=tuple(Node.parse(n) for n in nodes if isinstance(n, dict))
            if isinstance(nodes, list)
            else (),
            critical_path=_strs(data, "critical_path"),
            raw=dict(data),
        )

    def node(self, node_id: str) -> Node:
        """The node called ``node_id``; ``KeyError`` if the program has none."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)


@dataclass(frozen=True, slots=True)
class ProgramPage:
    """One page of ``GET /v1/programs``."""

    programs: tuple[Program, ...]
    total: int

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ProgramPage:
        items = data.get("programs")
        programs = (
            tuple(Program.parse(p) for p in items if isinstance(p, dict))
            if isinstance(items, list)
            else ()
        )
        return cls(programs, _int(data, "total"))


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What a cancel did (calls aborted, tools interrupted or flagged)."""

    program_id: str
    state: str
    aborted_calls: tuple[str, ...]
    interrupted_tools: tuple[str, ...]
    flagged_tools: tuple[str, ...]

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> CancelResult:
        return cls(
            program_id=_str(data, "program_id"),
            state=_str(data, "state"),
            aborted_calls=_strs(data, "aborted_calls"),
            interrupted_tools=_strs(data, "interrupted_tools"),
            flagged_tools=_strs(data, "flagged_tools"),
        )


@dataclass(frozen=True, slots=True)
class Tool:
    """A registered tool; ``owner`` is ``None`` for a platform-wide tool."""

    name: str
    owner: str | None
    description: str
    parameters: JSON
    side_effect: bool
    idempotent: bool
    timeout_s: float
    executor: JSON
    allowed_tenants: tuple[str, ...] | None = None
    rate_limit_per_s: float | None = None
    raw: JSON = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Tool:
        params, executor, allowed = (
            data.get("parameters"),
            data.get("executor"),
            data.get("allowed_tenants"),
        )
        return cls(
            name=_str(data, "name"),
            owner=_opt_str(data, "owner"),
            description=_str(data, "description"),
            parameters=params if isinstance(params, dict) else {},
            side_effect=data.get("side_effect") is True,
            idempotent=data.get("idempotent") is True,
            timeout_s=_num(data, "timeout_s"),
            executor=executor if isinstance(executor, dict) else {},
            allowed_tenants=tuple(map(str, allowed)) if isinstance(allowed, list) else None,
            rate_limit_per_s=_opt_num(data, "rate_limit_per_s"),
            raw=dict(data),
        )


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """The answer to a tool call: the first execution (``committed``) or a replay."""

    tool_call_id: str
    status: str
    result: Any
    latency_s: float

    @property
    def replayed(self) -> bool:
        """True when the result was read back, not produced by this call."""
        return self.status == "replayed"

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ToolCallResult:
        return cls(
            _str(data, "tool_call_id"), _str(data, "status"), data.get("result"),
            _num(data, "latency_s"),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """A tool call's durable state, as operators list it (``needs_reconcile`` first)."""

    tool_call_id: str
    program_id: str
    node_id: str
    tool: str
    state: str
    side_effect: bool
    idempotent: bool
    epoch: int
    error: str | None
    updated_at: float

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ToolCallRecord:
        return cls(
            tool_call_id=_str(data, "tool_call_id"),
            program_id=_str(data, "program_id"),
            node_id=_str(data, "node_id"),
            tool=_str(data, "tool"),
            state=_str(data, "state"),
            side_effect=data.get("side_effect") is True,
            idempotent=data.get("idempotent") is True,
            epoch=_int(data, "epoch"),
            error=_opt_str(data, "error"),
            updated_at=_num(data, "updated_at"),
        )


@dataclass(frozen=True, slots=True)
class AuditAction:
    """One row of the audit log."""

    ts: float
    actor: str
    action: str
    target: str
    result: str
    args: JSON

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> AuditAction:
        args = data.get("args")
        return cls(
            ts=_num(data, "ts"),
            actor=_str(data, "actor"),
            action=_str(data, "action"),
            target=_str(data, "target"),
            result=_str(data, "result"),
            args=args if isinstance(args, dict) else {},
        )


class ToolOptions(TypedDict, total=False):
    """Optional fields of a tool registration (see API.md, ``POST /v1/tools``)."""

    description: str
    side_effect: bool
    idempotent: bool
    timeout_s: float
    allowed_tenants: list[str] | None
    rate_limit_per_s: float | None
    burst: int | None
    max_concurrency: int | None
