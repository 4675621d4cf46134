"""The live program service: the controller, the runtime and the event hub, in wall-clock time.

The HTTP layer and the tool gateway call :class:`ProgramService` only; it is the one place
that turns requests into controller decisions and runtime actions. Every method runs on the
event loop, takes the caller's tenant (``None`` for an operator, who sees every tenant) and
raises :class:`~agentconsole.server.live.errors.ServiceError` subclasses for refusals.

Data flow of a chat call: resolve the program (explicit, or inferred from the prefix chain)
-> quotas -> node -> prompt -> ticket -> ``runtime.submit`` -> :class:`LiveCall` pumps the
stream -> :class:`CallAccounting` finishes the node. Tools (:class:`ToolPort`, what the
gateway calls): ``tool_started`` opens the tool node's attempt and, when the program then
waits on tools only, asks the tool-wait policy what to do with its KV. Cancel: pending nodes
cancelled, calls in flight aborted and confirmed, tools interrupted (read-only) or flagged
(side effects), KV dropped.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.program import NodeKind, Program, Quotas
from agentconsole.scheduler.runtime import CacheAction, Runtime
from agentconsole.server.live.accounting import CallAccounting
from agentconsole.server.live.admission import CallAdmission, ChatCall
from agentconsole.server.live.calls import LiveCall
from agentconsole.server.live.door import ProgramDoor
from agentconsole.server.live.errors import (
    Conflict,
    NotFound,
    QuotaError,
    ServiceError,
)
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.identity import PrefixChains
from agentconsole.server.live.nodes import NodeBook
from agentconsole.server.live.ownership import StoredIds
from agentconsole.server.live.servicemodel import OnlineServiceModel
from agentconsole.server.live.toolport import ToolPort
from agentconsole.server.live.toolwait import ToolWaitAdvisor

CancelListener = Callable[[str, list[str], list[str]], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class CancelReport:
    program_id: str
    aborted_calls: list[str]
    interrupted_tools: list[str]
    flagged_tools: list[str]


class ProgramService:
    """See the module docstring. Set ``runtime_ready`` once the runtime answers; ``await
    stop()`` at shutdown."""

    def __init__(
        self,
        runtime: Runtime,
        hub: EventHub,
        *,
        policy: str = "cp-cache",
        kv_policy: str = "adaptive",
        ready_timeout_s: float = 30.0,
        stored_ids: StoredIds | None = None,
        door: ProgramDoor | None = None,
    ) -> None:
        self.runtime = runtime
        #: the admission door for new programs (off unless configured)
        self.door = door or ProgramDoor(runtime)
        #: ids the store may hold (programs no longer in memory); none without a store
        self.stored_ids = stored_ids or StoredIds(lambda _: None)
        self.hub = hub
        self.model = OnlineServiceModel()
        self.controller = ProgramController(hub, self.model)
        self.policy = get_policy(policy)
        self.toolwait = ToolWaitAdvisor(
            kv_policy, runtime, hub, self.model, self.controller.tool_distribution
        )
        self.nodes = NodeBook(self.controller)
        self.chains = PrefixChains()
        self.draining = False
        self.runtime_ready = asyncio.Event()
        self.ready_timeout_s = ready_timeout_s
        self.calls: dict[str, LiveCall] = {}
        self.ended_by: dict[str, ServiceError] = {}  # why a program was stopped early
        self.accounting = CallAccounting(
            self.controller, hub, self.model, self._quota_stop, self._call_ended
        )
        self._by_program: dict[str, dict[str, LiveCall]] = {}
        self.admission = CallAdmission(self)
        #: the tool gateway's port (``gateway.ports.ProgramPort``)
        self.tools = ToolPort(self)
        self._cancel_listeners: list[CancelListener] = []
        self._background: set[asyncio.Task[Any]] = set()
        hub.resolve_tenants(self.tenant_of)

    async def stop(self) -> None:
        """Abort every call in flight (their clients get an end) and wait for background
        work (quota cancels) to finish."""
        await asyncio.gather(*(call.abort("shutdown", wait_s=1.0) for call in self.calls.values()))
        if self._background:
            await asyncio.wait(set(self._background), timeout=5.0)

    # -- lookups ------------------------------------------------------------------------------
    def tenant_of(self, program_id: str) -> str | None:
        program = self.controller.programs.get(program_id)
        return program.tenant if program is not None else None

    def owned(self, tenant: str | None, program_id: str) -> Program:
        """The live program, if ``tenant`` may see it (operators: ``None``); else NotFound."""
        program = self.controller.programs.get(program_id)
        if program is None or (tenant is not None and program.tenant != tenant):
            raise NotFound(f"program {program_id!r} not found", field="program_id")
        return program

    def calls_of(self, program_id: str) -> list[LiveCall]:
        """The program's calls in flight."""
        return list(self._by_program.get(program_id, {}).values())

    def forget(self, program_id: str) -> None:
        """Drop an ended program from memory (the store keeps it)."""
        program = self.controller.programs.get(program_id)
        if program is not None and program.state.terminal:
            self.controller.forget(program_id)
        self.ended_by.pop(program_id, None)
        self.toolwait.released(program_id)
        self.door.finish(program_id)

    # -- programs -------------------------------------------------------------------------------
    def open_program(
        self,
        tenant: str,
        program_id: str | None = None,
        *,
        deadline_s: float | None = None,
        quotas: Quotas | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Program:
        """Create a program for ``tenant``; Conflict if the id exists (for anyone)."""
        pid = program_id or f"prog-{uuid.uuid4().hex[:12]}"
        if pid in self.controller.programs:
            raise Conflict(f"program {pid!r} already exists", field="program_id")
        now = time.time()
        deadline = now + deadline_s if deadline_s is not None else None
        program = self.controller.open_program(
            pid, tenant, now, deadline=deadline, quotas=quotas, labels=labels
        )
        self.stored_ids.add(pid)
        return program

    async def check_new_id(self, tenant: str, program_id: str, *, explicit: bool) -> None:
        """Before opening ``program_id`` for ``tenant`` when it is not in memory: an id the
        store holds is Conflict for an explicit create, as in memory; on first sight
        (a call, a tool) another tenant's is NotFound and the tenant's own is opened again
        (an agent going on after a restart). See :mod:`ownership`."""
        if program_id in self.controller.programs:
            return
        owner = await self.stored_ids.owner(program_id)
        if owner is None or program_id in self.controller.programs:
            return
        if explicit:
            raise Conflict(f"program {program_id!r} already exists", field="program_id")
        if owner != tenant:
            raise NotFound(f"program {program_id!r} not found", field="program_id")

    def program_for_call(self, tenant: str, program_id: str, chat: ChatCall) -> Program:
        """The named program, created on first sight; NotFound if another tenant owns it."""
        program = self.controller.programs.get(program_id)
        if program is None:
            return self.open_program(
                tenant, program_id, deadline_s=chat.deadline_s, labels=chat.labels
            )
        if program.tenant != tenant:
            raise NotFound(f"program {program_id!r} not found", field="program_id")
        return program

    def require_running(self, program: Program) -> None:
        """Raise the reason a stopped program takes no more work (quota, else 409)."""
        if not program.state.terminal:
            return
        reason = self.ended_by.get(program.program_id)
        if reason is not None:
            raise reason
        raise Conflict(f"program {program.program_id!r} is {program.state.value}")

    async def check_quotas(self, program: Program, now: float) -> None:
        """Wall time (cancels the program: 403) and tokens (429) before new work starts."""
        quotas = program.quotas
        if quotas.wall_time_s is not None and now - program.created_at > quotas.wall_time_s:
            error = QuotaError(
                program.program_id, "wall_time_s", quotas.wall_time_s, now - program.created_at
            )
            await self.stop_for_quota(program.program_id, error)
            raise error
        if quotas.tokens is not None and program.tokens_used >= quotas.tokens:
            raise QuotaError(program.program_id, "tokens", quotas.tokens, program.tokens_used)

    def finish_program(self, tenant: str | None, program_id: str, *, success: bool) -> Program:
        """The agent says it is done; Conflict if the program was cancelled."""
        program = self.owned(tenant, program_id)
        if program.state.terminal and program.state.value == "cancelled":
            raise Conflict(f"program {program_id!r} is cancelled")
        self.toolwait.released(program_id)
        self.door.finish(program_id)
        return self.controller.finish_program(program_id, time.time(), success=success)

    async def cancel_program(
        self, tenant: str | None, program_id: str, *, reason: str = "user"
    ) -> CancelReport:
        """Cancel the program and everything in flight; idempotent. When this returns, every
        aborted call is confirmed out of the runtime (and its events are emitted)."""
        program = self.owned(tenant, program_id)
        if program.state.terminal and program.state.value != "cancelled":
            raise Conflict(f"program {program_id!r} is {program.state.value}")
        running = self.controller.cancel_program(program_id, time.time(), reason=reason)
        self.door.finish(program_id)
        tools = [n for n in running if n.kind is NodeKind.TOOL]
        flagged = [n.node_id for n in tools if n.tool is not None and n.tool.side_effect]
        interrupted = [n.node_id for n in tools if n.node_id not in flagged]
        calls = self.calls_of(program_id)
        await asyncio.gather(*(call.abort("cancel") for call in calls))
        self.toolwait.released(program_id)
        await self.runtime.cache_hint(program_id, CacheAction.DROP, 0.0)
        for listener in self._cancel_listeners:
            pending = listener(program_id, interrupted, flagged)
            if pending is not None:
                await pending
        return CancelReport(program_id, [c.call_id for c in calls], interrupted, flagged)

    async def stop_for_quota(self, program_id: str, error: ServiceError) -> None:
        """Cancel a program that went over a quota; later calls get ``error`` again."""
        self.ended_by.setdefault(program_id, error)
        program = self.controller.programs.get(program_id)
        if program is not None and not program.state.terminal:
            await self.cancel_program(None, program_id, reason=f"quota:{error.field}")

    def add_cancel_listener(self, listener: CancelListener) -> None:
        """Call ``listener(program_id, interrupted_tools, flagged_tools)`` on every cancel
        (the tool gateway interrupts read-only tools and lets side effects commit)."""
        self._cancel_listeners.append(listener)

    # -- LLM calls -------------------------------------------------------------------------------
    async def start_call(self, tenant: str, chat: ChatCall) -> LiveCall:
        """Admit a chat call and submit it to the runtime (see :mod:`admission`)."""
        return await self.admission.start(tenant, chat)

    def register(self, call: LiveCall) -> None:
        """Track a call that was just submitted (until its accounting ends it)."""
        self.calls[call.call_id] = call
        self._by_program.setdefault(call.program_id, {})[call.call_id] = call

    def _call_ended(self, call: LiveCall) -> None:
        self.calls.pop(call.call_id, None)
        mine = self._by_program.get(call.program_id)
        if mine is not None:
            mine.pop(call.call_id, None)
            if not mine:
                del self._by_program[call.program_id]
                self.door.call_ended(call.program_id)

    def _quota_stop(self, program_id: str, error: ServiceError) -> None:
        self.spawn(self.stop_for_quota(program_id, error))

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run ``coro`` in the background, keeping a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
