"""Typed results of the API: frozen dataclasses with the fields clients use most, and
``raw`` (the whole JSON object) for everything else. Parsing is lenient
(:mod:`agentconsole.httpclient.jsonread`): a field the server leaves out, or sends with another
type, gets its neutral value, so an older or newer server still decodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypedDict

from agentconsole.httpclient import JSON
from agentconsole.httpclient import jsonread as j


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
    def parse(cls, value: Any) -> Node:
        data = j.obj(value)
        return cls(
            node_id=j.text(data, "node_id"),
            kind=j.text(data, "kind"),
            state=j.text(data, "state"),
            parents=j.strings(data.get("parents")),
            branch=j.text(data, "branch") or "main",
            tool=j.opt_text(data, "tool"),
            attempts=j.integer(data, "attempts"),
            prompt_tokens=j.integer(data, "prompt_tokens"),
            cached_tokens=j.integer(data, "cached_tokens"),
            output_tokens=j.integer(data, "output_tokens"),
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
    def parse(cls, value: Any) -> Program:
        data = j.obj(value)
        return cls(
            program_id=j.text(data, "program_id"),
            tenant=j.text(data, "tenant"),
            state=j.text(data, "state"),
            created_at=j.num(data, "created_at"),
            finished_at=j.opt_num(data, "finished_at"),
            deadline=j.opt_num(data, "deadline"),
            labels=j.str_map(data.get("labels")),
            nodes_done=j.integer(data, "nodes_done"),
            nodes_known=j.integer(data, "nodes_known"),
            tokens_used=j.integer(data, "tokens_used"),
            tool_calls=j.integer(data, "tool_calls"),
            nodes=tuple(map(Node.parse, j.objects(data.get("nodes")))),
            critical_path=j.strings(data.get("critical_path")),
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
    """One page of ``GET /v1/programs``: ``total`` counts every match; ``next_cursor`` is the
    ``cursor`` of the next page (None on the last one)."""

    programs: tuple[Program, ...]
    total: int
    next_cursor: str | None = None

    @classmethod
    def parse(cls, value: Any) -> ProgramPage:
        data = j.obj(value)
        programs = tuple(map(Program.parse, j.objects(data.get("programs"))))
        return cls(programs, j.integer(data, "total"), j.opt_text(data, "next_cursor"))


@dataclass(frozen=True, slots=True)
class _Cancelled:
    """The fields a program cancel and a node cancel answer alike (docs/API.md), read in one
    place so that the two answers cannot drift apart."""

    program_id: str
    state: str
    aborted_calls: tuple[str, ...]
    interrupted_tools: tuple[str, ...]
    flagged_tools: tuple[str, ...]
    running_tools: tuple[str, ...] = ()

    @classmethod
    def _parse(cls, data: Mapping[str, Any], **own: Any) -> Self:
        """The shared fields read from ``data``; ``own``, a subclass's fields, as read."""
        return cls(
            program_id=j.text(data, "program_id"),
            state=j.text(data, "state"),
            aborted_calls=j.strings(data.get("aborted_calls")),
            interrupted_tools=j.strings(data.get("interrupted_tools")),
            flagged_tools=j.strings(data.get("flagged_tools")),
            running_tools=j.strings(data.get("running_tools")),
            **own,
        )


@dataclass(frozen=True, slots=True)
class CancelResult(_Cancelled):
    """What a program cancel did (calls aborted, gateway tools interrupted or flagged, the
    agent's own tools left running: their ``tool-calls/finish`` is still recorded)."""

    @classmethod
    def parse(cls, value: Any) -> Self:
        return cls._parse(j.obj(value))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeCancelResult(_Cancelled):
    """What a node cancel did: the node and its descendants it cancelled (``state`` is the
    node's), the calls and tools as :class:`CancelResult` says, and ``program_state``, the
    program's state after it: ``running``, or ``cancelled`` when what the aborted calls were
    charged took it over its token quota (``None`` from a server that does not say)."""

    node_id: str
    cancelled_nodes: tuple[str, ...]
    program_state: str | None = None

    @classmethod
    def parse(cls, value: Any) -> Self:
        data = j.obj(value)
        return cls._parse(
            data,
            node_id=j.text(data, "node_id"),
            cancelled_nodes=j.strings(data.get("cancelled_nodes")),
            program_state=j.opt_text(data, "program_state"),
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
    def parse(cls, value: Any) -> Tool:
        data = j.obj(value)
        allowed = data.get("allowed_tenants")
        return cls(
            name=j.text(data, "name"),
            owner=j.opt_text(data, "owner"),
            description=j.text(data, "description"),
            parameters=dict(j.obj(data.get("parameters"))),
            side_effect=j.flag(data, "side_effect"),
            idempotent=j.flag(data, "idempotent"),
            timeout_s=j.num(data, "timeout_s"),
            executor=dict(j.obj(data.get("executor"))),
            allowed_tenants=tuple(map(str, allowed)) if isinstance(allowed, list) else None,
            rate_limit_per_s=j.opt_num(data, "rate_limit_per_s"),
            raw=dict(data),
        )


@dataclass(frozen=True, slots=True)
class ToolPage:
    """One page of ``GET /v1/tools``: ``next_cursor`` is the ``cursor`` of the next page
    (None on the last one)."""

    tools: tuple[Tool, ...]
    next_cursor: str | None = None

    @classmethod
    def parse(cls, value: Any) -> ToolPage:
        data = j.obj(value)
        tools = tuple(map(Tool.parse, j.objects(data.get("tools"))))
        return cls(tools, j.opt_text(data, "next_cursor"))


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
    def parse(cls, value: Any) -> ToolCallResult:
        data = j.obj(value)
        return cls(
            j.text(data, "tool_call_id"), j.text(data, "status"), data.get("result"),
            j.num(data, "latency_s"),
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
    def parse(cls, value: Any) -> ToolCallRecord:
        data = j.obj(value)
        return cls(
            tool_call_id=j.text(data, "tool_call_id"),
            program_id=j.text(data, "program_id"),
            node_id=j.text(data, "node_id"),
            tool=j.text(data, "tool"),
            state=j.text(data, "state"),
            side_effect=j.flag(data, "side_effect"),
            idempotent=j.flag(data, "idempotent"),
            epoch=j.integer(data, "epoch"),
            error=j.opt_text(data, "error"),
            updated_at=j.num(data, "updated_at"),
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
    def parse(cls, value: Any) -> AuditAction:
        data = j.obj(value)
        return cls(
            ts=j.num(data, "ts"),
            actor=j.text(data, "actor"),
            action=j.text(data, "action"),
            target=j.text(data, "target"),
            result=j.text(data, "result"),
            args=dict(j.obj(data.get("args"))),
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
