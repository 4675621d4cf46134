"""Tools the agent runs itself: it reports start and finish so the scheduler knows the
program waits on a tool (``/v1/programs/{id}/tool-calls/start|finish``). Nothing is executed
here, so there is no idempotency claim; the same checks as a call guard the reports.

A report names a program in its path, so it must name one the tenant has: an id nobody has
answers the same 404 as another tenant's program (a report never creates a program, and the
answer does not tell whether the id is taken).

A report is answered once what it changed has committed (``committed``: the store's flush):
the agent takes the answer as the tool node's new state, so a crash right after it must not
undo that (the events would otherwise wait up to the event lane's linger, ~250 ms)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agentconsole.scheduler.program import ToolSpec
from agentconsole.server.gateway.audit import AuditActor, Auditor
from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.errors import GatewayError
from agentconsole.server.gateway.ports import ReportPort, port_errors
from agentconsole.server.gateway.registry import ToolRegistry
from agentconsole.server.gateway.request import (
    check_program_id,
    parse_body,
    parse_finished,
    parse_started,
)
from agentconsole.server.store.jsonutil import JSONValue

#: Start times kept for reports whose finish never comes (oldest dropped first).
MAX_OPEN_REPORTS = 100_000
V = TypeVar("V")


def _bounded_put(table: dict[tuple[str, str], V], key: tuple[str, str], value: V) -> None:
    """``table[key] = value``, the oldest entry dropped first at :data:`MAX_OPEN_REPORTS`."""
    if key not in table and len(table) >= MAX_OPEN_REPORTS:
        table.pop(next(iter(table)))
    table[key] = value


class AgentReports:
    """Start/finish reports of agent-run tools."""

    def __init__(
        self,
        registry: ToolRegistry,
        audit: Auditor,
        config: GatewayConfig,
        committed: Callable[[], Awaitable[None]],
    ) -> None:
        self._registry = registry
        self._audit = audit
        self._config = config
        self._committed = committed
        self._started: dict[tuple[str, str], float] = {}
        #: starts that took effect and whose answer was refused (their commit failed: 503),
        #: by (program, node) -> tool: a retry of one is that start, not a second (409)
        self._unanswered: dict[tuple[str, str], str] = {}

    async def started(
        self,
        tenant: str,
        program_id: str,
        raw: bytes,
        port: ReportPort,
        *,
        actor: AuditActor | None = None,
    ) -> dict[str, JSONValue]:
        """The agent starts running ``tool`` for ``node_id``: create the node if needed
        (counts against the ``tool_calls`` quota) and mark the program as waiting on it.

        A tool the tenant sees gives the node its registered spec; any other name (a platform
        tool not open to the tenant included, so it answers as an unknown name) is the
        agent's own tool. A refusal is audited as ``actor`` (by default the tenant)."""
        actor = actor or AuditActor.of_tenant(tenant)
        try:
            check_program_id(program_id)
            node_id, tool = parse_started(parse_body(raw, self._config.max_body_bytes))
            compiled = self._registry.resolve(tenant, tool)
            async with port_errors():
                await port.check_program(tenant, program_id, must_exist=True)
                spec = compiled.definition.spec() if compiled is not None else ToolSpec(tool)
                await port.ensure_tool_node(tenant, program_id, node_id, spec)
                repeat = self._unanswered.get((program_id, node_id)) == tool
                await port.tool_started(program_id, node_id, repeat=repeat)
        except GatewayError as error:
            self._audit.rejected(actor, "tool.report", f"program:{program_id}", error, {})
            raise
        key = (program_id, node_id)
        if not repeat:  # a retry keeps the first start's time: the tool runs since then
            _bounded_put(self._started, key, time.monotonic())
        try:
            await self._committed()
        except BaseException:
            # started, yet its agent was not told so: its retry is this start, not a second;
            # recorded only now, so a concurrent start meanwhile is still a second one (409)
            _bounded_put(self._unanswered, key, tool)
            raise
        self._unanswered.pop(key, None)
        return {"program_id": program_id, "node_id": node_id, "tool": tool, "state": "running"}

    async def finished(
        self,
        tenant: str,
        program_id: str,
        raw: bytes,
        port: ReportPort,
        *,
        actor: AuditActor | None = None,
    ) -> dict[str, JSONValue]:
        """The agent's tool for ``node_id`` ended; ``latency_s`` defaults to the time since
        its start report (without one, the core measures it). A refusal is audited as
        ``actor`` (by default the tenant)."""
        actor = actor or AuditActor.of_tenant(tenant)
        try:
            check_program_id(program_id)
            node_id, outcome, latency = parse_finished(parse_body(raw, self._config.max_body_bytes))
            async with port_errors():
                await port.check_program(tenant, program_id, must_exist=True)
                started = self._started.pop((program_id, node_id), None)
                if latency is None and started is not None:
                    latency = time.monotonic() - started
                await port.tool_finished(program_id, node_id, outcome, latency)
        except GatewayError as error:
            self._audit.rejected(actor, "tool.report", f"program:{program_id}", error, {})
            raise
        await self._committed()
        return {
            "program_id": program_id,
            "node_id": node_id,
            "outcome": outcome,
            "latency_s": latency,
        }
