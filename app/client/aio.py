"""The asynchronous client: ``AsyncAgentConsole(base_url, api_key)``, the same methods as
:class:`agentconsole.client.sync.AgentConsole`, awaited."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, Unpack

import httpx

from agentconsole.client import calls
from agentconsole.client.base import DEFAULT_TIMEOUT_S, ClientBase
from agentconsole.client.calls import Outcome
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
    ToolOptions,
)

T = TypeVar("T")


class AsyncAgentConsole(ClientBase):
    """A client over one ``httpx.AsyncClient`` (pass ``http`` to supply your own)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(base_url, api_key)
        self._http = http or httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAgentConsole:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, call: calls.Call[T]) -> T:
        response = await self._http.request(
            call.method,
            self.base_url + call.path,
            json=call.json,
            params=call.params,
            headers=self.headers,
        )
        result: T = self._decode(call, response)
        return result

    # -- programs and nodes --------------------------------------------------------------------
    async def create_program(
        self,
        program_id: str | None = None,
        *,
        deadline_s: float | None = None,
        quotas: Mapping[str, float | int | None] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Program:
        """Open a program (``POST /v1/programs``); the server picks an id when none is given.
        ``quotas``: ``wall_time_s``, ``tokens``, ``tool_calls``, ``branches``."""
        return await self._run(calls.create_program(program_id, deadline_s, quotas, labels))

    async def get_program(self, program_id: str) -> Program:
        """The program with its nodes, edges and critical path."""
        return await self._run(calls.get_program(program_id))

    async def list_programs(
        self,
        *,
        state: str | None = None,
        label: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> ProgramPage:
        """One page of programs, newest first (``label`` is ``key:value``)."""
        return await self._run(calls.list_programs(state, label, tenant, limit, offset))

    async def cancel_program(self, program_id: str) -> CancelResult:
        """Cancel the program: calls aborted, read-only tools interrupted, side effects
        flagged. Idempotent."""
        return await self._run(calls.cancel_program(program_id))

    async def finish_program(self, program_id: str, *, success: bool = True) -> Program:
        """The agent is done with the program."""
        return await self._run(calls.finish_program(program_id, success))

    async def add_node(
        self,
        program_id: str,
        node_id: str,
        *,
        kind: Literal["llm", "tool"] = "llm",
        parents: Sequence[str] = (),
        tool: str | None = None,
        branch: str | None = None,
    ) -> Node:
        """Declare a node and its parents before running it (the DAG edges)."""
        return await self._run(calls.add_node(program_id, node_id, kind, parents, tool, branch))

    async def get_node(self, program_id: str, node_id: str) -> Node:
        """One node with its timings."""
        return await self._run(calls.get_node(program_id, node_id))

    # -- tools ---------------------------------------------------------------------------------
    async def register_tool(
        self,
        name: str,
        parameters: Mapping[str, Any],
        executor: Mapping[str, Any],
        **options: Unpack[ToolOptions],
    ) -> Tool:
        """Register (or replace) a tool. ``parameters`` is a JSON Schema 2020-12 object with
        ``"additionalProperties": false`` at every level; ``executor`` is ``{"type":
        "builtin", "name": ...}``, ``{"type": "http", "url": ...}`` or ``{"type": "agent"}``."""
        body = self._tool_body(name, parameters, executor, options)
        return await self._run(calls.register_tool(body))

    async def list_tools(self) -> list[Tool]:
        """The tools this key may call."""
        return await self._run(calls.list_tools())

    async def call_tool(
        self,
        name: str,
        program_id: str,
        node_id: str,
        arguments: Mapping[str, Any],
        *,
        attempt: int = 1,
    ) -> ToolCallResult:
        """Call a tool through the gateway. Safe to retry: the same ``(program_id, node_id,
        attempt)`` replays the committed result instead of running the tool again; use a new
        ``attempt`` to run it again on purpose. Raises :class:`ToolFailedError` (424),
        :class:`NeedsReconcileError` (409) or :class:`IdempotencyMismatchError` (422)."""
        return await self._run(calls.call_tool(name, program_id, node_id, arguments, attempt))

    async def tool_started(self, program_id: str, node_id: str, tool: str) -> JSON:
        """Report that the agent starts running ``tool`` itself (the program waits on it)."""
        return await self._run(calls.tool_started(program_id, node_id, tool))

    async def tool_finished(
        self,
        program_id: str,
        node_id: str,
        outcome: Outcome = "ok",
        *,
        latency_s: float | None = None,
    ) -> JSON:
        """Report that the agent's own tool ended."""
        return await self._run(calls.tool_finished(program_id, node_id, outcome, latency_s))

    # -- operators (operator key) --------------------------------------------------------------
    async def preempt(self, program_id: str) -> JSON:
        """Take the program's running calls off the GPU and requeue them."""
        return await self._run(calls.program_action(program_id, "preempt"))

    async def operator_cancel(self, program_id: str) -> CancelResult:
        """Cancel any tenant's program."""
        return await self._run(calls.cancel_program(program_id, operator=True))

    async def boost(self, program_id: str, amount: float | None = None) -> JSON:
        """Rank the program's queued calls first."""
        body = {} if amount is None else {"amount": amount}
        return await self._run(calls.program_action(program_id, "boost", body))

    async def drain(self, enabled: bool = True) -> JSON:
        """Stop (or resume) admitting new calls."""
        return await self._run(calls.operator_action("drain", {"enabled": enabled}))

    async def set_policy(self, policy: str | None = None, kv_policy: str | None = None) -> JSON:
        """Switch the scheduling and/or KV policy live."""
        body = {k: v for k, v in (("policy", policy), ("kv_policy", kv_policy)) if v}
        return await self._run(calls.operator_action("policy", body))

    async def audit(self, limit: int = 100) -> list[AuditAction]:
        """The audit log, newest first."""
        return await self._run(calls.audit(limit))

    async def tool_calls(
        self, *, state: str | None = None, program_id: str | None = None, limit: int = 100
    ) -> list[ToolCallRecord]:
        """Durable tool-call states (``state="needs_reconcile"``: decisions pending)."""
        return await self._run(calls.tool_calls(state, program_id, limit))

    async def reconcile(
        self, tool_call_id: str, *, result: Any = None, retry: bool = False
    ) -> ToolCallRecord:
        """Settle a ``needs_reconcile`` call: record ``result`` as what happened (replayed
        from now on), or ``retry=True`` to allow one new execution with the same key."""
        return await self._run(calls.reconcile(tool_call_id, self._reconcile_body(result, retry)))

    # -- observation ---------------------------------------------------------------------------
    async def health(self) -> JSON:
        """``GET /health``."""
        return await self._run(calls.get_json("/health"))

    async def overview(self) -> JSON:
        """``GET /v1/overview`` (platform numbers, as the consoles show them)."""
        return await self._run(calls.get_json("/v1/overview"))
