"""Every API request the clients make, built once: method, path, body and how to decode the
answer. The sync and async clients only differ in how they send a :class:`Call`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from agentconsole.client.types import (
    JSON,
    AuditAction,
    CancelResult,
    Node,
    Program,
    ProgramPage,
    Tool,
    ToolCallRecord,
    ToolCallResult,
)

T = TypeVar("T")
Outcome = Literal["ok", "fail", "timeout"]


def _seg(value: str) -> str:
    """One path segment, percent-encoded (ids never change the path's shape)."""
    return quote(value, safe="")


def _json(data: Any) -> JSON:
    return data if isinstance(data, dict) else {}


def _drop_none(body: Mapping[str, Any]) -> JSON:
    return {k: v for k, v in body.items() if v is not None}


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the decoder of its JSON answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: JSON | None = None
    params: Mapping[str, str | int] = field(default_factory=dict)


# -- programs and nodes ------------------------------------------------------------------------
def create_program(
    program_id: str | None,
    deadline_s: float | None,
    quotas: Mapping[str, float | int | None] | None,
    labels: Mapping[str, str] | None,
) -> Call[Program]:
    body = _drop_none(
        {"program_id": program_id, "deadline_s": deadline_s,
         "quotas": dict(quotas) if quotas else None, "labels": dict(labels) if labels else None}
    )  # fmt: skip
    return Call("POST", "/v1/programs", lambda d: Program.parse(_json(d)), body)


def get_program(program_id: str) -> Call[Program]:
    return Call("GET", f"/v1/programs/{_seg(program_id)}", lambda d: Program.parse(_json(d)))


def list_programs(
    state: str | None, label: str | None, tenant: str | None, limit: int, offset: int
) -> Call[ProgramPage]:
    params: dict[str, str | int] = {"limit": limit, "offset": offset}
    params.update({k: v for k, v in (("state", state), ("label", label), ("tenant", tenant)) if v})
    return Call("GET", "/v1/programs", lambda d: ProgramPage.parse(_json(d)), params=params)


def cancel_program(program_id: str, *, operator: bool = False) -> Call[CancelResult]:
    prefix = "/v1/operator/programs" if operator else "/v1/programs"
    path = f"{prefix}/{_seg(program_id)}/cancel"
    return Call("POST", path, lambda d: CancelResult.parse(_json(d)), {})


def finish_program(program_id: str, success: bool) -> Call[Program]:
    path = f"/v1/programs/{_seg(program_id)}/finish"
    return Call("POST", path, lambda d: Program.parse(_json(d)), {"success": success})


def add_node(
    program_id: str,
    node_id: str,
    kind: Literal["llm", "tool"],
    parents: Sequence[str],
    tool: str | None,
    branch: str | None,
) -> Call[Node]:
    body = _drop_none(
        {"node_id": node_id, "kind": kind, "parents": list(parents), "tool": tool, "branch": branch}
    )
    return Call(
        "POST", f"/v1/programs/{_seg(program_id)}/nodes", lambda d: Node.parse(_json(d)), body
    )


def get_node(program_id: str, node_id: str) -> Call[Node]:
    path = f"/v1/programs/{_seg(program_id)}/nodes/{_seg(node_id)}"
    return Call("GET", path, lambda d: Node.parse(_json(d)))


# -- tools -------------------------------------------------------------------------------------
def register_tool(body: JSON) -> Call[Tool]:
    return Call("POST", "/v1/tools", lambda d: Tool.parse(_json(d)), _drop_none(body))


def list_tools() -> Call[list[Tool]]:
    return Call("GET", "/v1/tools", lambda d: [Tool.parse(t) for t in _json(d).get("tools", [])])


def call_tool(
    name: str, program_id: str, node_id: str, arguments: Mapping[str, Any], attempt: int
) -> Call[ToolCallResult]:
    body = {"program_id": program_id, "node_id": node_id, "arguments": dict(arguments),
            "attempt": attempt}  # fmt: skip
    path = f"/v1/tools/{_seg(name)}/call"
    return Call("POST", path, lambda d: ToolCallResult.parse(_json(d)), body)


def tool_started(program_id: str, node_id: str, tool: str) -> Call[JSON]:
    path = f"/v1/programs/{_seg(program_id)}/tool-calls/start"
    return Call("POST", path, _json, {"node_id": node_id, "tool": tool})


def tool_finished(
    program_id: str, node_id: str, outcome: Outcome, latency_s: float | None
) -> Call[JSON]:
    body = _drop_none({"node_id": node_id, "outcome": outcome, "latency_s": latency_s})
    return Call("POST", f"/v1/programs/{_seg(program_id)}/tool-calls/finish", _json, body)


# -- operators ---------------------------------------------------------------------------------
def operator_action(path: str, body: JSON | None = None) -> Call[JSON]:
    return Call("POST", f"/v1/operator/{path}", _json, body or {})


def program_action(program_id: str, action: str, body: JSON | None = None) -> Call[JSON]:
    return operator_action(f"programs/{_seg(program_id)}/{action}", body)


def audit(limit: int) -> Call[list[AuditAction]]:
    return Call(
        "GET",
        "/v1/operator/audit",
        lambda d: [AuditAction.parse(a) for a in _json(d).get("actions", [])],
        params={"limit": limit},
    )


def tool_calls(state: str | None, program_id: str | None, limit: int) -> Call[list[ToolCallRecord]]:
    params: dict[str, str | int] = {"limit": limit}
    params.update({k: v for k, v in (("state", state), ("program_id", program_id)) if v})
    return Call(
        "GET",
        "/v1/operator/tool-calls",
        lambda d: [ToolCallRecord.parse(c) for c in _json(d).get("tool_calls", [])],
        params=params,
    )


def reconcile(tool_call_id: str, body: JSON) -> Call[ToolCallRecord]:
    path = f"/v1/operator/tool-calls/{_seg(tool_call_id)}/reconcile"
    return Call("POST", path, lambda d: ToolCallRecord.parse(_json(d)), body)


def get_json(path: str) -> Call[JSON]:
    return Call("GET", path, _json)
