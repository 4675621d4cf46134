"""The consoles' view of the tool calls that need an operator (``GET /v1/operator/tool-calls``)
and of the operator's decision on one (``POST /v1/operator/tool-calls/{id}/reconcile``).

A side-effecting tool call without a downstream idempotency key that a timeout, an ambiguous
error or a crash left in doubt is ``needs_reconcile``: the server never runs it again by
itself and refuses its agent's retry (409) until an operator says what happened: ``commit``
(the effect happened; the result given is replayed to the retry) or ``retry`` (allow one more
execution with the same key). Beside those the consoles list the side-effecting calls still
running (``in_progress``), such as those a cancel let run to their commit: each one ends
committed, or lands in the first list when its end leaves it in doubt.

An intent does not name its tenant; the tenant of its program does, read once per program and
remembered (:class:`ProgramTenants`): a program never changes tenant. Operator key only: the
server refuses the listing to a tenant's key (403).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentconsole.httpclient import ApiError
from agentconsole.httpclient import jsonread as j

NEEDS_RECONCILE = "needs_reconcile"
IN_PROGRESS = "in_progress"
#: the feed's kinds that tell a tool call started, ended or was settled (``scheduler/events.py``):
#: an end in doubt adds a call to the operator's list, a side effect's start or end changes the
#: other, another operator's reconcile takes one off
TOOL_EVENT_KINDS = frozenset({"tool.started", "tool.finished", "tool.reconciled"})
#: the decisions the reconcile route takes
RECONCILE_ACTIONS = ("commit", "retry")
#: what a call flagged by the start-up recovery says (it stores no error): the server stopped
#: while the tool ran, so whether its effect happened is unknown
STOPPED_MID_CALL = "the server stopped while it ran: its effect may or may not have happened"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool intent as the operator route answers it, with its program's ``tenant`` once
    known (None: not read yet, or its program cannot be read)."""

    tool_call_id: str
    program_id: str
    node_id: str
    tool: str
    side_effect: bool
    idempotent: bool
    state: str
    #: when the call was claimed (the execution began), unix seconds
    created_at: float
    #: when its state last changed: for a call in doubt, since when it waits for an operator
    updated_at: float
    #: the stored failure (``{"type", "message", "outcome"}`` as JSON text), or None
    error: str | None
    tenant: str | None = None

    @property
    def why(self) -> str:
        """Why the call is in doubt, in words: the stored failure's type and message, or, for
        a call the start-up recovery flagged (no failure stored), that the server stopped."""
        if self.error is None:
            return STOPPED_MID_CALL
        try:
            stored = json.loads(self.error)
        except ValueError:
            return self.error
        if not isinstance(stored, dict):
            return self.error
        kind, message = j.text(stored, "type"), j.text(stored, "message")
        return f"{kind}: {message}" if kind and message else message or kind or self.error

    @staticmethod
    def parse(data: Any) -> ToolCall:
        """Parse one intent (``intent_json`` of the server)."""
        d = j.obj(data)
        return ToolCall(
            tool_call_id=j.text(d, "tool_call_id"),
            program_id=j.text(d, "program_id"),
            node_id=j.text(d, "node_id"),
            tool=j.text(d, "tool"),
            side_effect=j.flag(d, "side_effect"),
            idempotent=j.flag(d, "idempotent"),
            state=j.text(d, "state"),
            created_at=j.num(d, "created_at"),
            updated_at=j.num(d, "updated_at"),
            error=j.opt_text(d, "error"),
        )


@dataclass(frozen=True, slots=True)
class ToolCallBoard:
    """What the operator must settle (``needs_reconcile``, longest waiting first) and the side
    effects still running (oldest first)."""

    needs_reconcile: tuple[ToolCall, ...]
    running: tuple[ToolCall, ...]

    def find(self, tool_call_id: str) -> ToolCall | None:
        """The call in doubt of that id, if listed."""
        return next((c for c in self.needs_reconcile if c.tool_call_id == tool_call_id), None)


class ProgramTenants:
    """Program id -> tenant, each read once (``lookup``) and remembered, the newest
    ``keep``: a program never changes tenant. A failed lookup is not remembered (the next
    read asks again)."""

    def __init__(self, lookup: Callable[[str], str], keep: int = 4096) -> None:
        self._lookup = lookup
        self._keep = keep
        self._known: OrderedDict[str, str] = OrderedDict()

    def tenant_of(self, program_id: str) -> str | None:
        """The tenant of ``program_id``, or None when it cannot be read now."""
        if program_id in self._known:
            self._known.move_to_end(program_id)
            return self._known[program_id]
        try:
            tenant = self._lookup(program_id)
        except ApiError:
            return None
        self._known[program_id] = tenant
        if len(self._known) > self._keep:
            self._known.popitem(last=False)
        return tenant

    def named(self, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
        """``calls`` with their tenants."""
        return tuple(replace(c, tenant=self.tenant_of(c.program_id)) for c in calls)


def read_board(
    list_calls: Callable[[str], list[ToolCall]], tenants: ProgramTenants
) -> ToolCallBoard:
    """The calls in doubt and the side effects running, read by ``list_calls(state)`` (the
    listing's most recently changed first, turned to the longest waiting first), with their
    tenants. Raises what ``list_calls`` raises (a tenant key's 403 included)."""
    in_doubt = sorted(list_calls(NEEDS_RECONCILE), key=lambda c: (c.updated_at, c.tool_call_id))
    running = [c for c in list_calls(IN_PROGRESS) if c.side_effect]
    running.sort(key=lambda c: (c.created_at, c.tool_call_id))
    return ToolCallBoard(tenants.named(in_doubt), tenants.named(running))


def parse_result(text: str) -> Any:
    """The ``result`` an operator typed for a commit: JSON, or null when left empty. Raises
    ``ValueError`` (with the parser's words) for text that is not JSON."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(f"the result is not JSON: {error}") from error


def describe_reconciled(action: str, call: ToolCall) -> str:
    """What the server did, for the operator's notice."""
    where = f"{call.program_id}/{call.node_id} {call.tool}"
    if action == "commit":
        return f"committed {where}: the agent's retry gets this result; the tool does not run"
    return f"retry allowed for {where}: the agent's next call with the same key runs it once"
