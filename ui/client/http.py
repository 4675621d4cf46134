"""The consoles' HTTP client: observation reads and operator actions over ``docs/API.md``.

:class:`ConsoleApi` is what the terminal dashboard depends on; :class:`HttpConsoleClient` is
its implementation on the shared transport of :mod:`agentconsole.httpclient` (tests inject an
in-memory one). Calls are synchronous and are made from worker threads, never from the UI
thread. Every failure is an :class:`ApiError`: an error answer, or no answer at all
(:class:`UnreachableError`, status 0).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx

from agentconsole.httpclient import Call, SyncTransport, UnreachableError, drop_none, segment
from agentconsole.httpclient import jsonread as j
from agentconsole.ui.client.door import Door
from agentconsole.ui.client.feed import FeedItem, read_feed
from agentconsole.ui.client.modelcompat import ModelCompat
from agentconsole.ui.client.models import (
    AuditEntry,
    Identity,
    KVState,
    Overview,
    Policies,
    PolicyChoices,
    TenantRow,
)
from agentconsole.ui.client.nodecancel import NodeCancel
from agentconsole.ui.client.programs import ProgramDetail, ProgramPage, ProgramSummary
from agentconsole.ui.client.toolcalls import RECONCILE_ACTIONS, ToolCall
from agentconsole.ui.client.whatif import WindowReplay

PAGE_SIZE = 500
#: the most tool calls of one state a console lists (the listing's own bound is 1000)
TOOL_CALLS_LIMIT = 500
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ActionResult:
    """The answer to an operator action."""

    action: str
    program_id: str
    body: Mapping[str, Any]


class ConsoleApi(Protocol):
    """What a console needs from the server. Every method may raise :class:`ApiError`."""

    def overview(self) -> Overview:
        """``GET /v1/overview``."""

    def programs(self, state: str | None = None, limit: int = 2000) -> ProgramPage:
        """Up to ``limit`` programs (all states when ``state`` is None), paging by the
        server's cursor as needed (stable while programs start and end between reads)."""

    def program(self, program_id: str) -> ProgramDetail:
        """``GET /v1/programs/{id}`` with nodes, edges and critical path."""

    def tenants(self) -> list[TenantRow]:
        """``GET /v1/tenants``."""

    def kv(self) -> KVState:
        """``GET /v1/kv``."""

    def audit(self, limit: int = 100) -> list[AuditEntry]:
        """``GET /v1/operator/audit``, newest first."""

    def door(self) -> Door:
        """``GET /v1/operator/door``: the admission door and what it learned (operator key
        only: a tenant key's :class:`ApiError` has status 403)."""

    def act(self, action: str, program_id: str, amount: float | None = None) -> ActionResult:
        """Preempt or boost (``POST /v1/operator/programs/{id}/{action}``, operator key
        only), or cancel (``POST /v1/programs/{id}/cancel``: the operator cancel with an
        operator key, a tenant's own program with its key)."""

    def cancel_node(self, program_id: str, node_id: str) -> NodeCancel:
        """``POST /v1/programs/{id}/nodes/{node_id}/cancel``: cancel the node and its
        descendants not yet ended (the operator's, audited, with an operator key; a tenant's
        own program with its key)."""

    def drain(self, enabled: bool) -> Mapping[str, Any]:
        """``POST /v1/operator/drain``: stop (or resume) admitting new calls."""

    def set_policy(self, policy: str | None, kv_policy: str | None) -> Policies:
        """``POST /v1/operator/policy``: switch the scheduling and/or the tool-wait KV policy
        by name (None: leave it); the policies then in force. An unknown name is refused
        (422) with a message that lists the server's names."""

    def policy_choices(self) -> PolicyChoices:
        """``GET /v1/operator/policy``: the policies in force and the names the switch
        accepts (operator key only; a server older than it answers 404)."""

    def whoami(self) -> Identity:
        """``GET /v1/whoami``: the key's tenant and whether it is an operator's (any key; a
        server older than it answers 404)."""

    def replay_window(self, since: float, tenant: str | None = None) -> WindowReplay:
        """``POST /v1/operator/whatif``: write the programs that arrived since ``since``
        (unix seconds, until now) as a trace on the server; its path and bench command."""

    def model_compatibility(self) -> ModelCompat:
        """``GET /v1/models/compatibility``: which served models could share KV, and why."""

    def tool_calls(self, state: str, limit: int = TOOL_CALLS_LIMIT) -> list[ToolCall]:
        """``GET /v1/operator/tool-calls?state=``: the gateway's tool calls in ``state``, most
        recently changed first (operator key only: a tenant key's :class:`ApiError` has status
        403)."""

    def reconcile(self, tool_call_id: str, action: str, result: Any = None) -> ToolCall:
        """``POST /v1/operator/tool-calls/{id}/reconcile``: settle a ``needs_reconcile`` call,
        ``commit`` with ``result`` (the effect happened) or ``retry`` (one more execution);
        the call as it is now. A call in another state is refused (409), an unknown id 404."""

    def feed(self, stop: threading.Event) -> Iterator[FeedItem]:
        """The live feed until ``stop`` is set (see :func:`read_feed`)."""


class HttpConsoleClient:
    """:class:`ConsoleApi` over HTTP with an operator (or tenant) bearer key."""

    def __init__(self, url: str, key: str, *, timeout_s: float = 10.0) -> None:
        self._transport = SyncTransport(url, key, timeout=timeout_s)
        self.url = self._transport.base_url

    def close(self) -> None:
        """Close the connection pool; later calls raise."""
        self._transport.close()

    def _send(self, call: Call[T]) -> T:
        try:
            return self._transport.send(call)
        except httpx.HTTPError as error:
            raise UnreachableError(f"{self.url}: {type(error).__name__}") from error

    def _get(self, path: str, params: dict[str, str | int] | None = None) -> j.JsonObject:
        return self._send(Call("GET", path, j.obj, params=params or {}))

    def overview(self) -> Overview:
        return Overview.parse(self._get("/v1/overview"))

    def programs(self, state: str | None = None, limit: int = 2000) -> ProgramPage:
        # Keyset paging: each page continues strictly after the last row of the one before
        # (``next_cursor``), so programs that end or start between two page reads neither
        # hide nor repeat rows, as an offset did (the list flickered past one page).
        out: dict[str, ProgramSummary] = {}
        total = 0
        after: dict[str, str | int] = {}
        read = 0
        while len(out) < limit:
            params: dict[str, str | int] = {"limit": min(PAGE_SIZE, limit - len(out)), **after}
            if state:
                params["state"] = state
            body = self._get("/v1/programs", params)
            page = [ProgramSummary.parse(p) for p in j.objects(body.get("programs"))]
            read += len(page)
            total = j.integer(body, "total", len(out) + len(page))
            # keyed by id all the same: a row can never show twice, whatever the server did
            out.update((p.program_id, p) for p in page)
            if not page:
                break
            if "next_cursor" in body:
                cursor = j.opt_text(body, "next_cursor")
                if cursor is None:
                    break
                after = {"cursor": cursor}
            elif read < total:  # a server older than the cursor: by offset, as it understands
                after = {"offset": read}
            else:
                break
        return ProgramPage(tuple(out.values()), max(total, len(out)))

    def program(self, program_id: str) -> ProgramDetail:
        return ProgramDetail.parse(self._get(f"/v1/programs/{segment(program_id)}"))

    def tenants(self) -> list[TenantRow]:
        return [TenantRow.parse(t) for t in j.objects(self._get("/v1/tenants").get("tenants"))]

    def kv(self) -> KVState:
        return KVState.parse(self._get("/v1/kv"))

    def audit(self, limit: int = 100) -> list[AuditEntry]:
        body = self._get("/v1/operator/audit", {"limit": limit})
        return [AuditEntry.parse(a) for a in j.objects(body.get("actions"))]

    def door(self) -> Door:
        return Door.parse(self._get("/v1/operator/door"))

    def act(self, action: str, program_id: str, amount: float | None = None) -> ActionResult:
        if action not in ("preempt", "cancel", "boost"):
            raise ValueError(f"unknown operator action {action!r}")
        payload = {} if amount is None else {"amount": amount}
        # a cancel goes to the program's own route: with an operator key the server makes it
        # the operator cancel (audited alike), and a tenant key may cancel its own programs
        # there, where the operator route refuses it (403, one more audit row)
        base = "/v1/programs" if action == "cancel" else "/v1/operator/programs"
        path = f"{base}/{segment(program_id)}/{action}"
        return ActionResult(action, program_id, self._send(Call("POST", path, j.obj, payload)))

    def cancel_node(self, program_id: str, node_id: str) -> NodeCancel:
        # the program's own route, as the program cancel: with an operator key the server makes
        # it the operator's (audited as ``cancel_node``), and a tenant's key may cancel a node
        # of its own program there, where the operator route refuses it (403, an audit row)
        path = f"/v1/programs/{segment(program_id)}/nodes/{segment(node_id)}/cancel"
        return self._send(Call("POST", path, NodeCancel.parse, {}))

    def drain(self, enabled: bool) -> Mapping[str, Any]:
        """``POST /v1/operator/drain``: stop (or resume) admitting new calls."""
        return self._send(Call("POST", "/v1/operator/drain", j.obj, {"enabled": enabled}))

    def set_policy(self, policy: str | None, kv_policy: str | None) -> Policies:
        body = drop_none({"policy": policy, "kv_policy": kv_policy})
        return self._send(Call("POST", "/v1/operator/policy", Policies.parse, body))

    def policy_choices(self) -> PolicyChoices:
        return PolicyChoices.parse(self._get("/v1/operator/policy"))

    def whoami(self) -> Identity:
        return Identity.parse(self._get("/v1/whoami"))

    def replay_window(self, since: float, tenant: str | None = None) -> WindowReplay:
        body = drop_none({"since": max(since, 0.0), "tenant": tenant})
        return self._send(Call("POST", "/v1/operator/whatif", WindowReplay.parse, body))

    def model_compatibility(self) -> ModelCompat:
        return ModelCompat.parse(self._get("/v1/models/compatibility"))

    def tool_calls(self, state: str, limit: int = TOOL_CALLS_LIMIT) -> list[ToolCall]:
        body = self._get("/v1/operator/tool-calls", {"state": state, "limit": limit})
        return [ToolCall.parse(c) for c in j.objects(body.get("tool_calls"))]

    def reconcile(self, tool_call_id: str, action: str, result: Any = None) -> ToolCall:
        if action not in RECONCILE_ACTIONS:
            raise ValueError(f"unknown reconcile action {action!r}")
        # a retry takes no result (the server refuses one: 422)
        payload = {"action": action, "result": result} if action == "commit" else {"action": action}
        path = f"/v1/operator/tool-calls/{segment(tool_call_id)}/reconcile"
        return self._send(Call("POST", path, ToolCall.parse, payload))

    def feed(self, stop: threading.Event) -> Iterator[FeedItem]:
        # A client of its own: the feed holds one connection open for as long as it runs.
        with self._transport.session() as http:
            yield from read_feed(http, stop)
