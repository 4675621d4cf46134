"""Every SDK method, written once as the builder of its request: the method's signature and
documentation, its method, path and body, and the decoder of the answer. The clients
(:class:`~agentconsole.client.sync.AgentConsole`, blocking, and
:class:`~agentconsole.client.aio.AsyncAgentConsole`, awaited) expose each builder as a method
(:mod:`agentconsole.client.endpoint`) and only differ in how they send its :class:`Call`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Unpack

from agentconsole.client.types import (
    AuditAction,
    CancelResult,
    Node,
    NodeCancelResult,
    Program,
    ProgramPage,
    Tool,
    ToolCallRecord,
    ToolCallResult,
    ToolOptions,
    ToolPage,
)
from agentconsole.httpclient import JSON, Call, drop_none, segment
from agentconsole.httpclient.jsonread import obj, objects

Outcome = Literal["ok", "fail", "timeout"]
#: tools a page when the client reads every page: the most the server gives in one
LIST_PAGE = 1000


def _json(data: Any) -> JSON:
    return dict(obj(data))


def _program_path(program_id: str, *rest: str) -> str:
    return "/".join(("/v1/programs", segment(program_id), *rest))


# -- programs and nodes ------------------------------------------------------------------------
def create_program(
    program_id: str | None = None,
    *,
    deadline_s: float | None = None,
    quotas: Mapping[str, float | int | None] | None = None,
    labels: Mapping[str, str] | None = None,
    idempotency_key: str | None = None,
) -> Call[Program]:
    """Open a program (``POST /v1/programs``); the server picks an id when none is given.
    ``quotas``: ``wall_time_s``, ``tokens``, ``tool_calls``, ``branches``. With
    ``idempotency_key`` (e.g. a UUID made once per intended program) the same call sent again,
    after a timeout or a server restart, answers the program the first one opened."""
    body = drop_none(
        {"program_id": program_id, "deadline_s": deadline_s,
         "quotas": dict(quotas) if quotas else None, "labels": dict(labels) if labels else None}
    )  # fmt: skip
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
    return Call("POST", "/v1/programs", Program.parse, body, headers=headers)


def get_program(program_id: str) -> Call[Program]:
    """The program with its nodes, edges and critical path."""
    return Call("GET", _program_path(program_id), Program.parse)


def list_programs(
    *,
    state: str | None = None,
    label: str | None = None,
    tenant: str | None = None,
    limit: int = 100,
    offset: int = 0,
    cursor: str | None = None,
) -> Call[ProgramPage]:
    """One page of programs, newest first (``label`` is ``key:value``). For the next page
    pass ``cursor=page.next_cursor`` (None on the last page): it continues strictly after
    this page's last row, so programs starting or ending meanwhile skip or repeat nothing.
    ``offset`` is deprecated (rows shift under it); it cannot be combined with ``cursor``."""
    params: dict[str, str | int] = {"limit": limit}
    # offset only when asked for: the server refuses a cursor with a non-zero offset, and a
    # default of 0 says nothing
    if offset:
        params["offset"] = offset
    params.update(
        {
            k: v
            for k, v in (("state", state), ("label", label), ("tenant", tenant), ("cursor", cursor))
            if v
        }
    )
    return Call("GET", "/v1/programs", ProgramPage.parse, params=params)


def cancel_program(program_id: str) -> Call[CancelResult]:
    """Cancel the program: calls aborted, read-only tools interrupted, side effects
    flagged. Idempotent."""
    return Call("POST", _program_path(program_id, "cancel"), CancelResult.parse, {})


def cancel_node(program_id: str, node_id: str) -> Call[NodeCancelResult]:
    """Cancel a node and its descendants not yet ended (a speculative branch dropped): their
    calls aborted, read-only tools interrupted, side effects flagged; the program runs on, and
    a node with a cancelled parent is refused (409). Idempotent."""
    path = _program_path(program_id, "nodes", segment(node_id), "cancel")
    return Call("POST", path, NodeCancelResult.parse, {})


def finish_program(program_id: str, *, success: bool = True) -> Call[Program]:
    """The agent is done with the program."""
    return Call("POST", _program_path(program_id, "finish"), Program.parse, {"success": success})


def add_node(
    program_id: str,
    node_id: str,
    *,
    kind: Literal["llm", "tool"] = "llm",
    parents: Sequence[str] = (),
    tool: str | None = None,
    branch: str | None = None,
) -> Call[Node]:
    """Declare a node and its parents before running it (the DAG edges)."""
    body = drop_none(
        {"node_id": node_id, "kind": kind, "parents": list(parents), "tool": tool, "branch": branch}
    )
    return Call("POST", _program_path(program_id, "nodes"), Node.parse, body)


def get_node(program_id: str, node_id: str) -> Call[Node]:
    """One node with its timings."""
    return Call("GET", _program_path(program_id, "nodes", segment(node_id)), Node.parse)


# -- tools -------------------------------------------------------------------------------------
def register_tool(
    name: str,
    parameters: Mapping[str, Any],
    executor: Mapping[str, Any],
    **options: Unpack[ToolOptions],
) -> Call[Tool]:
    """Register (or replace) a tool. ``parameters`` is a JSON Schema 2020-12 object with
    ``"additionalProperties": false`` at every level; ``executor`` is ``{"type":
    "builtin", "name": ...}``, ``{"type": "http", "url": ...}`` or ``{"type": "agent"}``."""
    body = {"name": name, "parameters": dict(parameters), "executor": dict(executor), **options}
    return Call("POST", "/v1/tools", Tool.parse, drop_none(body))


def tool_page(*, limit: int = 100, cursor: str | None = None) -> Call[ToolPage]:
    """One page of the tools this key may call, by name (an operator key: every tool, by
    name then owner). For the next page pass ``cursor=page.next_cursor`` (None on the last
    page); a page may hold fewer than ``limit`` tools (the server bounds its bytes too)."""
    params: dict[str, str | int] = {"limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/tools", ToolPage.parse, params=params)


def list_tools(cursor: str | None = None) -> Call[ToolPage]:
    """The tools this key may call, every page read in turn (:func:`tool_page` for one)."""
    return tool_page(limit=LIST_PAGE, cursor=cursor)


def delete_tool(name: str) -> Call[Tool]:
    """Delete one of this key's tools (an operator key: a platform tool); answers the deleted
    tool. Calls of it already running finish; later calls of the name raise
    :class:`NotFoundError` (404), as for a name nobody registered. Deleting a name this key
    has no tool of (gone already, another tenant's) raises :class:`NotFoundError` too; a
    platform tool with a tenant key, :class:`PermissionDeniedError` (403)."""
    return Call("DELETE", f"/v1/tools/{segment(name)}", Tool.parse)


def call_tool(
    name: str, program_id: str, node_id: str, arguments: Mapping[str, Any], *, attempt: int = 1
) -> Call[ToolCallResult]:
    """Call a tool through the gateway. Safe to retry: the same ``(program_id, node_id,
    attempt)`` replays the committed result instead of running the tool again; use a new
    ``attempt`` to run it again on purpose. Raises :class:`ToolFailedError` (424),
    :class:`NeedsReconcileError` (409) or :class:`IdempotencyMismatchError` (422)."""
    body = {"program_id": program_id, "node_id": node_id, "arguments": dict(arguments),
            "attempt": attempt}  # fmt: skip
    return Call("POST", f"/v1/tools/{segment(name)}/call", ToolCallResult.parse, body)


def tool_started(program_id: str, node_id: str, tool: str) -> Call[JSON]:
    """Report that the agent starts running ``tool`` itself (the program waits on it)."""
    path = _program_path(program_id, "tool-calls", "start")
    return Call("POST", path, _json, {"node_id": node_id, "tool": tool})


def tool_finished(
    program_id: str, node_id: str, outcome: Outcome = "ok", *, latency_s: float | None = None
) -> Call[JSON]:
    """Report that the agent's own tool ended."""
    body = drop_none({"node_id": node_id, "outcome": outcome, "latency_s": latency_s})
    return Call("POST", _program_path(program_id, "tool-calls", "finish"), _json, body)


# -- operators (operator key) ------------------------------------------------------------------
def _operator(path: str, body: JSON) -> Call[JSON]:
    return Call("POST", f"/v1/operator/{path}", _json, body)


def preempt(program_id: str) -> Call[JSON]:
    """Take the program's running calls off the GPU and requeue them."""
    return _operator(f"programs/{segment(program_id)}/preempt", {})


def operator_cancel(program_id: str) -> Call[CancelResult]:
    """Cancel any tenant's program."""
    path = f"/v1/operator/programs/{segment(program_id)}/cancel"
    return Call("POST", path, CancelResult.parse, {})


def boost(program_id: str, amount: float | None = None) -> Call[JSON]:
    """Rank the program's queued calls first."""
    return _operator(f"programs/{segment(program_id)}/boost", drop_none({"amount": amount}))


def drain(enabled: bool = True) -> Call[JSON]:
    """Stop (or resume) admitting new calls."""
    return _operator("drain", {"enabled": enabled})


def set_policy(policy: str | None = None, kv_policy: str | None = None) -> Call[JSON]:
    """Switch the scheduling and/or KV policy live."""
    body = {k: v for k, v in (("policy", policy), ("kv_policy", kv_policy)) if v}
    return _operator("policy", body)


def audit(limit: int = 100) -> Call[list[AuditAction]]:
    """The audit log, newest first."""
    return Call(
        "GET",
        "/v1/operator/audit",
        lambda d: [AuditAction.parse(a) for a in objects(obj(d).get("actions"))],
        params={"limit": limit},
    )


def tool_calls(
    *, state: str | None = None, program_id: str | None = None, limit: int = 100
) -> Call[list[ToolCallRecord]]:
    """Durable tool-call states (``state="needs_reconcile"``: decisions pending)."""
    params: dict[str, str | int] = {"limit": limit}
    params.update({k: v for k, v in (("state", state), ("program_id", program_id)) if v})
    return Call(
        "GET",
        "/v1/operator/tool-calls",
        lambda d: [ToolCallRecord.parse(c) for c in objects(obj(d).get("tool_calls"))],
        params=params,
    )


def reconcile(
    tool_call_id: str, *, result: Any = None, retry: bool = False
) -> Call[ToolCallRecord]:
    """Settle a ``needs_reconcile`` call: record ``result`` as what happened (replayed
    from now on), or ``retry=True`` to allow one new execution with the same key."""
    body = {"action": "retry"} if retry else {"action": "commit", "result": result}
    path = f"/v1/operator/tool-calls/{segment(tool_call_id)}/reconcile"
    return Call("POST", path, ToolCallRecord.parse, body)


# -- observation -------------------------------------------------------------------------------
def health() -> Call[JSON]:
    """``GET /health``."""
    return Call("GET", "/health", _json)


def overview() -> Call[JSON]:
    """``GET /v1/overview`` (platform numbers, as the consoles show them)."""
    return Call("GET", "/v1/overview", _json)
