"""The live program service: the controller, the runtime and the event hub, in wall-clock time.

The HTTP layer and the tool gateway call :class:`ProgramService` only; it is the one place
that turns requests into controller decisions and runtime actions. Every method runs on the
event loop, takes the caller's tenant (``None`` for an operator, who sees every tenant) and
raises :class:`~agentconsole.server.live.errors.ServiceError` subclasses for refusals.

Every program-level decision is the :class:`ProgramDriver`'s (the same object ``bench``
drives): the service feeds it what happens and carries out the actions it returns
(:meth:`ProgramService.apply`) with asyncio. Data flow of a chat call: resolve the program
(explicit, or inferred from the prefix chain) -> quotas -> prompt -> the door -> node ->
probe and ticket -> ``runtime.submit`` -> :class:`LiveCall` listens to the stream ->
:class:`CallAccounting` reports its end to the driver. Tools (:class:`ToolPort`, what the
gateway calls) report their start and end to the driver, which decides what happens to the
program's KV while it waits on them. Cancel: pending nodes cancelled, calls in flight aborted
and confirmed (answered with the quota's error when a quota stopped the program), the
gateway's tools interrupted (read-only) or flagged (side effects, let commit), the agent's own
tools listed as running, KV dropped; a tool the cancel left running still ends on its node
(``toolport.py``). A node cancel (:meth:`ProgramService.cancel_node`) does the same to one node
and its descendants (a speculative branch dropped) while the program runs on: its calls are
aborted through the same path, the gateway stops its read-only tools, and the cancelled nodes
are ``withdrawn``: nothing runs on them or hangs from them again (``nodes.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentconsole.kvtiers.advisor import ToolWaitAdvisor
from agentconsole.kvtiers.toolwait import DEFAULT_TOOL_WAIT_POLICY, get_tool_wait_policy
from agentconsole.scheduler.actions import (
    AbortCalls,
    Action,
    CacheHint,
    ProgramEnded,
    StartPrograms,
    StopProgram,
)
from agentconsole.scheduler.controller import ABANDONED, ProgramController
from agentconsole.scheduler.dag import descendants
from agentconsole.scheduler.door import DOOR_ON_BY_DEFAULT
from agentconsole.scheduler.doorroom import DOOR_MEMORY_SHARE
from agentconsole.scheduler.driver import ProgramDriver, SettleFailed
from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.policies import DEFAULT_POLICY, Policy, get_policy
from agentconsole.scheduler.program import Node, NodeKind, NodeState, Program, Quotas
from agentconsole.scheduler.runtime import Runtime
from agentconsole.server.live.accounting import CallAccounting
from agentconsole.server.live.calls import LiveCall
from agentconsole.server.live.door import ClientGone, DoorRoom
from agentconsole.server.live.engineview import LiveCost, RuntimeView
from agentconsole.server.live.errors import (
    Conflict,
    NotFound,
    ProgramClosed,
    QuotaError,
    ServiceError,
    ShuttingDown,
    Unavailable,
)
from agentconsole.server.live.eventtail import INTERRUPTED
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.identity import PrefixChains
from agentconsole.server.live.insertionbook import InsertionBook
from agentconsole.server.live.insertions import PromptMemory
from agentconsole.server.live.intake import CallIntake, ChatCall
from agentconsole.server.live.modeldesk import ModelDesk, SelectionConfig
from agentconsole.server.live.nodes import NodeBook
from agentconsole.server.live.ownership import StoredIds
from agentconsole.server.live.promptblocks import PromptBlockRecorder
from agentconsole.server.live.reopen import rebuild, rebuild_created
from agentconsole.server.live.servicemodel import OnlineServiceModel
from agentconsole.server.live.tenants import TenantBudgets
from agentconsole.server.live.toolcalls import ToolCallBook
from agentconsole.server.live.toolport import ToolPort
from agentconsole.server.store.repository import ProgramView, StoredEvent

#: a stored program's rows (None: none written) and its events past them, by id
StoredProgram = Callable[[str], tuple[ProgramView | None, list[StoredEvent]]]

log = logging.getLogger(__name__)

#: ``(program_id, read_only, flagged)``: the program was cancelled, the gateway's runs of it
#: are to stop now (read-only ones; side effects commit); returns the nodes whose tools it did
#: stop (one no longer running, or not begun, is not stopped)
CancelListener = Callable[[str, list[str], list[str]], list[str]]
#: ``(program_id, node_ids)``: the gateway's read-only tools of these nodes are to stop now;
#: returns the nodes whose tools it did stop (one no longer running is not stopped)
NodeCancelListener = Callable[[str, list[str]], list[str]]
#: ``(read_only, flagged)`` -> the nodes the gateway stopped (the listeners of one cancel)
_StopTools = Callable[[list[str], list[str]], Iterable[str]]


@dataclass(frozen=True, slots=True)
class DoorSettings:
    """The program door in ``serve`` (``limits.program_admission``)."""

    enabled: bool = DOOR_ON_BY_DEFAULT
    wait_s: float = 120.0
    budget_tokens: int | None = None
    memory_share: float = DOOR_MEMORY_SHARE
    #: waiting programs start by response ratio of their kind's expected run (else in order)
    shortest_first: bool = True
    #: the tenants' weights and share slack its line shares starts by: the engines' guard's
    #: (``runtime.extra.fairness``, with ``limits.tenant_weights``), as ``bench`` shares one
    fairness: FairnessConfig | None = None


@dataclass(frozen=True, slots=True)
class CancelReport:
    """What a cancel stopped: the calls aborted; of the tools the gateway's executors ran,
    the read-only ones it stopped (interrupted) and the side effects flagged (let run to their
    commit); and the tools still running, whose ends are still recorded: those the agent runs
    itself (reported, or asked for by the model; or runs a restart left open) and a read-only
    run the gateway could not stop any more (its result committing)."""

    program_id: str
    aborted_calls: list[str]
    interrupted_tools: list[str]
    flagged_tools: list[str]
    running_tools: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NodeCancelReport:
    """What a node cancel stopped: the nodes it cancelled (the node and its descendants not
    yet ended), the calls aborted and the tools as :class:`CancelReport` says."""

    program_id: str
    node_id: str
    cancelled_nodes: list[str]
    aborted_calls: list[str]
    interrupted_tools: list[str]
    flagged_tools: list[str]
    running_tools: list[str]


class ProgramService:
    """See the module docstring. Set ``runtime_ready`` once the runtime answers; ``await
    stop()`` at shutdown."""

    def __init__(
        self,
        runtime: Runtime,
        hub: EventHub,
        *,
        policy: str = DEFAULT_POLICY,
        kv_policy: str = DEFAULT_TOOL_WAIT_POLICY,
        ready_timeout_s: float = 30.0,
        stored_ids: StoredIds | None = None,
        door: DoorSettings | None = None,
        tenants: TenantBudgets | None = None,
        stored_program: StoredProgram | None = None,
        model_name: str = "default",
        selection: SelectionConfig | None = None,
    ) -> None:
        self.runtime = runtime
        #: which served model runs each call (several served: chosen per call, ``modeldesk``)
        self.models = ModelDesk(runtime, model_name, selection)
        if self.models.multi:
            hub.subscribe(self.models.costs.observe)  # each model's service, learned
        door = door or DoorSettings()
        #: ids the store may hold (programs no longer in memory); none without a store
        self.stored_ids = stored_ids or StoredIds(lambda _: None)
        #: tool nodes a restart found running (their run died with the old process) or whose
        #: start failed (``ToolPort.tool_started``): a start of one (the gateway's or the
        #: agent's retry) is its next attempt; dropped with their program (``ToolPort.forget``)
        self.orphaned_tools: set[tuple[str, str]] = set()
        #: a stored program's rows and its events past them (to rebuild it after a restart
        #: or once it left memory); none without a store
        self.stored_program: StoredProgram = stored_program or (lambda _: (None, []))
        self.hub = hub
        #: tenant-level limits (tokens per minute, concurrent programs, stored bytes)
        self.tenants = tenants or TenantBudgets()
        self.model = OnlineServiceModel()
        self.controller = ProgramController(hub, self.model)
        self.policy: Policy = get_policy(policy)
        self.kv_policy = kv_policy
        self.driver = ProgramDriver(
            self.controller,
            ToolWaitAdvisor(get_tool_wait_policy(kv_policy)),
            LiveCost(self.model, runtime),
            program_aware=self.policy.program_aware,
            admission=door.enabled,
            memory_share=door.memory_share,
            budget_tokens=door.budget_tokens,
            shortest_first=door.shortest_first,
            fairness=door.fairness,
        )
        self.view = RuntimeView(runtime)
        #: first calls of programs the driver keeps at the door
        self.door = DoorRoom(self._left_door, wait_s=door.wait_s)
        self.nodes = NodeBook(self.controller, self.tenants)
        self.chains = PrefixChains()
        self.draining = False
        self.runtime_ready = asyncio.Event()
        #: why the runtime failed to start (None: it did not fail); set with the event
        self.runtime_failure: str | None = None
        self.runtime_failed = asyncio.Event()
        self.ready_timeout_s = ready_timeout_s
        self.calls: dict[str, LiveCall] = {}
        self.ended_by: dict[str, ServiceError] = {}  # why a program was stopped early
        self.accounting = CallAccounting(self, hub, self.model)
        #: records each call's prompt structure in the store (none without a store)
        self.prompt_blocks: PromptBlockRecorder | None = None
        #: each program's last prompt (memory only) and the insertions found against it
        self.prompt_memory = PromptMemory()
        self.insertions = InsertionBook()
        self._by_program: dict[str, dict[str, LiveCall]] = {}
        self.intake = CallIntake(self)
        #: the tool gateway's port (``gateway.ports.ProgramPort``)
        self.tools = ToolPort(self)
        #: tool calls models asked for, as tool nodes (agents that report no tools)
        self.tool_calls = ToolCallBook(self)
        self._cancel_listeners: list[CancelListener] = []
        self._node_cancel_listeners: list[NodeCancelListener] = []
        self._background: set[asyncio.Task[Any]] = set()
        #: set by :meth:`shut_down`: the server is closing, new calls are refused
        self.closing = False
        #: whether the store can record what a request does (the server wires its writer's
        #: liveness; without a store, always): a call or write it could not record is
        #: refused (:meth:`require_store`)
        self.store_alive: Callable[[], bool] = lambda: True
        hub.resolve_tenants(self.tenant_of)

    # -- policies ----------------------------------------------------------------------------------
    def use_policy(self, name: str) -> None:
        """Order calls by policy ``name`` from now on (``KeyError`` if unknown)."""
        policy = get_policy(name)
        self.runtime.set_policy(name)
        self.policy = policy
        self.driver.program_aware = policy.program_aware
        if not self.driver.door_open:  # no door under this policy: nobody waits at it
            self.door.open_all()
            started = self.driver.let_all_in(time.time())
            if started:  # their starts carried out (the gates are open already)
                self.settle(started)

    def use_kv_policy(self, name: str) -> None:
        """Decide tool waits by tool-wait policy ``name`` from now on (``KeyError``)."""
        self.driver.advisor = ToolWaitAdvisor(get_tool_wait_policy(name))
        self.kv_policy = name

    # -- the driver's actions ------------------------------------------------------------------
    def settle(self, actions: list[Action] | None = None) -> None:
        """Let the driver decide what the events just reported changed, and carry out those
        actions and ``actions`` (asynchronous ones in the background)."""
        todo = [*(actions or ()), *self._decided(time.time())]
        if todo:
            self.spawn(self.apply(todo))

    async def settled(self, actions: list[Action] | None = None) -> None:
        """:meth:`settle`, returning once the actions are carried out."""
        await self.apply([*(actions or ()), *self._decided(time.time())])

    def _decided(self, now: float) -> list[Action]:
        """The driver's decisions for what the events just reported changed. One that fails
        (a runtime's view raising, say) is logged, and the actions decided before it are
        still carried out, as are those the caller brings: a start or an end dropped would
        leave programs waiting at the door."""
        try:
            return self.driver.settle(self.view, now)
        except SettleFailed as failed:
            log.exception("deciding for program %s failed; the rest go on", failed.program_id)
            return failed.actions

    async def apply(self, actions: list[Action]) -> None:
        """Carry out the driver's actions, in order: let programs through the door, apply
        cache hints, abort calls, stop programs over a quota, drop an ended program's
        placement. One that fails is logged and the rest still run (the driver's state has
        moved already: a start or an end skipped would leave calls waiting at the door)."""
        for action in actions:
            try:
                await self._apply_one(action)
            except Exception:
                log.exception("driver action %s failed; the rest go on", type(action).__name__)

    async def _apply_one(self, action: Action) -> None:
        if isinstance(action, StartPrograms):
            self.door.open(action.program_ids)
        elif isinstance(action, CacheHint):
            await self.runtime.cache_hint(action.program_id, action.action, action.retain_s)
        elif isinstance(action, AbortCalls):
            live = [self.calls[c] for c in action.call_ids if c in self.calls]
            for call in live:
                # a quota that stopped the program (the wall time's cancel, the token quota
                # another call crossed) is each call's answer too, streamed or not, as later
                # calls get it: a 409 "aborted (cancel)" would say a user cancelled it
                stopped_by = self.ended_by.get(call.program_id)
                if stopped_by is not None:
                    call.stop(stopped_by)
            ended = await asyncio.gather(
                *(call.abort("cancel") for call in live), return_exceptions=True
            )
            for call, outcome in zip(live, ended, strict=True):
                if isinstance(outcome, BaseException):  # the others are aborted all the same
                    log.error("abort of %s failed: %r", call.call_id, outcome)
        elif isinstance(action, StopProgram):
            error = QuotaError(action.program_id, action.quota, action.limit, action.value)
            await self.stop_for_quota(action.program_id, error)
        elif isinstance(action, ProgramEnded):
            # calls still waiting at the door wake to find it ended (409), not time out
            self.door.open((action.program_id,))
            self.runtime.program_ended(action.program_id)
            # its pin goes with it now, not when the program leaves memory (minutes later: the
            # listing showed it, a restart did not)
            self.models.forget(action.program_id)

    def _left_door(self, program_id: str) -> None:
        self.settle(self.driver.leave_door(program_id, time.time()))

    def shut_down(self) -> None:
        """The server is closing: refuse new calls (503) and end every call in flight with the
        same error now, so each client is answered (a JSON error, a stream's error frame and
        ``[DONE]``) before the server stops waiting for its connections."""
        self.closing = True
        self.door.open_all()  # calls at the door wake to the same refusal (intake checks)
        for call in list(self.calls.values()):
            call.stop(ShuttingDown(), reason="shutdown")

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

    def tokens_held(self, program: Program) -> int:
        """The tokens ``program`` used, charged or not: its spent calls' and, for its calls in
        flight, their uncached prompts and what they received so far (charged at their end)."""
        in_flight = sum(c.received + c.pending_prompt for c in self.calls_of(program.program_id))
        return program.tokens_used + in_flight

    def forget(self, program_id: str) -> None:
        """Drop an ended program from memory (the store keeps it)."""
        program = self.controller.programs.get(program_id)
        if program is not None and program.state.terminal:
            self.controller.forget(program_id)
        self.ended_by.pop(program_id, None)
        self.tool_calls.forget(program_id)
        self.tools.forget(program_id)
        self.prompt_memory.forget(program_id)
        self.insertions.forget(program_id)
        self.models.forget(program_id)
        self.settle(self.driver.forget(program_id, time.time()))

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
        self.tenants.check_new_program(tenant, self.tenants.running_programs(tenant))
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
        await self._reopen_stored(program_id)

    async def program_of(self, tenant: str | None, program_id: str) -> Program:
        """The program ``tenant`` (operators: ``None``, any tenant's) names, from memory or,
        when it left memory (retention, a restart), rebuilt in memory from the store as a
        call naming it rebuilds it (:meth:`check_new_id`), so that a finish, a cancel or a
        node of it is answered as in memory (idempotent, or 409 for an ended one). NotFound
        for an unknown id and for another tenant's, alike (no existence oracle)."""
        if program_id not in self.controller.programs:
            owner = await self.stored_ids.owner(program_id)
            if owner is not None and (tenant is None or owner == tenant):
                await self._reopen_stored(program_id)
        return self.owned(tenant, program_id)

    async def _reopen_stored(self, program_id: str) -> None:
        """Rebuild the stored ``program_id`` in memory (:meth:`reopen`) unless it is there
        already (another request rebuilt it while the store was read) or has no rows."""
        view, tail = await asyncio.to_thread(self.stored_program, program_id)
        if (view is not None or tail) and program_id not in self.controller.programs:
            self.reopen(view, tail)

    def reopen(self, view: ProgramView | None, tail: Sequence[StoredEvent] = ()) -> Program | None:
        """Rebuild a stored program in memory with its DAG and standing, its events past the
        rows (``tail``) replayed; ``view`` None: a program only the event log knows
        (``reopen``). Returns it, or None when there is nothing to rebuild."""
        now = time.time()
        program = rebuild(view, now, tail) if view is not None else rebuild_created(tail, now)
        if program is None:
            return None
        self.controller.adopt(program)
        if not program.state.terminal:
            self.tenants.reopened(program.tenant)
        self.orphaned_tools.update(
            (program.program_id, n.node_id)
            for n in program.nodes.values()
            if n.kind is NodeKind.TOOL and n.state is NodeState.RUNNING
        )
        if view is not None:
            nodes = (dict(n.data) for n in view.nodes)
            self.insertions.adopt(program.program_id, view.program.data, nodes)
        self.stored_ids.add(program.program_id)
        return program

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

    def require_store(self, what: str) -> None:
        """Raise :class:`Unavailable` (503, retryable) when the store's writer has stopped on a
        fatal error: what the request would record (``what``, for the message) would be lost
        while its answer said it was done, so it is refused until an operator restarts the
        server (``/ready`` says ``store: false`` meanwhile)."""
        if not self.store_alive():
            raise Unavailable(f"the store cannot record {what} (see /ready); retry later")

    def require_running(self, program: Program) -> None:
        """Raise the reason a stopped program takes no more work (quota, else 409)."""
        if not program.state.terminal:
            return
        reason = self.ended_by.get(program.program_id)
        if reason is not None:
            raise reason
        raise ProgramClosed(program.program_id, program.state.value)

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

    def check_call_tokens(self, program: Program, uncached_prompt: int) -> None:
        """429 ``quota_exceeded`` for a call whose uncached prompt would take the program past
        its token quota beside what it used and what its calls in flight hold (their prompts
        and what they received): a prompt is charged at the call's end, so a large one (or a
        burst of calls) passed a quota only spent calls were checked against. The program
        runs on: a shorter prompt may still fit."""
        limit = program.quotas.tokens
        if limit is None:
            return
        used = self.tokens_held(program) + uncached_prompt
        if used > limit:
            why = f"this call's prompt needs {uncached_prompt} uncached tokens"
            raise QuotaError(program.program_id, "tokens", limit, used, why=why)

    def finish_program(
        self,
        tenant: str | None,
        program_id: str,
        *,
        success: bool,
        last_active: float | None = None,
    ) -> Program:
        """The agent says it is done; Conflict if the program was cancelled, idempotent once
        it has ended otherwise. ``last_active``: when its work really ended (an idle finish
        comes long after). The program must be in memory: a caller naming one that may have
        left it (the finish route) gets it back first with :meth:`program_of`."""
        program = self.owned(tenant, program_id)
        if program.state.terminal and program.state.value == "cancelled":
            raise ProgramClosed(program_id, "cancelled")
        if program.state.terminal:
            return program
        # tool calls the model asked for whose answer never came close as abandoned, and so
        # do tools the agent reported started and never ended: a finished program has nothing
        # running (a gateway run still in flight commits in the gateway; its late end is
        # recorded on its node, as one after a cancel: ``ToolPort.tool_finished``)
        self.tool_calls.abandon(program_id)
        now = time.time()
        for node in list(program.nodes.values()):
            if node.kind is NodeKind.TOOL and node.state is NodeState.RUNNING:
                self.controller.close_node(program_id, node.node_id, now, ABANDONED)
        self.settle(self.driver.finish(program_id, now, success=success, last_active=last_active))
        return program

    def finish_idle(self, program_id: str, last_active: float) -> None:
        """The program has been idle past the limit since ``last_active``: it finishes (the
        sweeper)."""
        self.finish_program(None, program_id, success=True, last_active=last_active)

    async def cancel_program(
        self, tenant: str | None, program_id: str, *, reason: str = "user"
    ) -> CancelReport:
        """Cancel the program and everything in flight; idempotent, Conflict for one that
        finished or failed. One that left memory is rebuilt from the store first
        (:meth:`program_of`). When this returns, every aborted call is confirmed out of the
        runtime (and its events are emitted). Of its running tools the gateway's read-only
        runs are interrupted (those the gateway stopped), its side effects flagged, and the rest
        listed as running: a read-only run past its executor (its result committing), the
        agent's own tools; a start the cancel overtook (``ToolPort.tool_started`` refuses it:
        nothing of it ran) is listed nowhere (:meth:`_stop_tools`)."""
        program = await self.program_of(tenant, program_id)
        if program.state.terminal and program.state.value != "cancelled":
            raise ProgramClosed(program_id, program.state.value)
        running = [n for n in program.nodes.values() if n.state is NodeState.RUNNING]
        calls = self.calls_of(program_id)
        now = time.time()
        actions = self.driver.cancel(program_id, now, reason=reason)
        tools = [n for n in running if n.kind is NodeKind.TOOL]

        def stop(read_only: list[str], flagged: list[str]) -> Iterable[str]:
            for listener in self._cancel_listeners:
                yield from listener(program_id, read_only, flagged)

        interrupted, flagged, running_tools = self._stop_tools(program_id, tools, now, stop)
        await self.settled(actions)
        aborted = [c.call_id for c in calls]
        return CancelReport(program_id, aborted, interrupted, flagged, running_tools)

    def _stop_tools(
        self, program_id: str, tools: list[Node], now: float, stop: _StopTools
    ) -> tuple[list[str], list[str], list[str]]:
        """A cancel's running tool nodes ``tools``: (interrupted, flagged, running). A start
        the cancel overtook (``ToolPort.starting``: nothing of it runs yet) is none of them:
        ``ToolPort.tool_started`` refuses it once its actions are done and closes its attempt
        ``interrupted``, so nothing of it is to stop, to let commit or to wait for. Of the
        rest, those the gateway's executors run, side effects are flagged (let run to their
        commit) and the read-only ones go to ``stop``, the gateway, which stops what still
        runs of them and says which: only those are interrupted, their attempts closed now.
        The others (a run whose executor ended, its result committing) and the agent's own
        tools are running: their attempts stay open and their ends are recorded on their
        cancelled nodes (``ToolPort.tool_finished``), as flagged ones' are. No await between
        the stop and the close: an interruption's own end must find its attempt closed (no
        late end); none from the cancel's change of its program or node to here either, so
        a start still starting here is sure to be refused."""
        tools = [n for n in tools if not self.tools.starting(program_id, n.node_id)]
        executed = [n for n in tools if self.tools.executes(program_id, n.node_id)]
        flagged = [n.node_id for n in executed if n.tool is not None and n.tool.side_effect]
        read_only = [n.node_id for n in executed if n.node_id not in flagged]
        stopped = set(stop(read_only, flagged))
        # the gateway's word over the port's: a run it stopped is interrupted, whoever began it
        interrupted = [n.node_id for n in tools if n.node_id in stopped - set(flagged)]
        for node_id in interrupted:
            self.controller.close_attempt(program_id, node_id, now, INTERRUPTED)
        left = {*flagged, *interrupted}
        return interrupted, flagged, [n.node_id for n in tools if n.node_id not in left]

    async def cancel_node(
        self, tenant: str | None, program_id: str, node_id: str, *, by: str = "user"
    ) -> NodeCancelReport:
        """Cancel ``node_id`` and its descendants not yet ended; the program runs on and may
        add nodes (none under these). Its calls queued or running are aborted (confirmed when
        this returns, as a program cancel's), the gateway's read-only tools interrupted (those
        the gateway stopped), its side effects let run to their commit (flagged), and the
        agent's own tools and the gateway's runs it could not stop any more listed as running:
        all but the interrupted still end on their nodes (``ToolPort.tool_finished``); a start
        the cancel overtook is only among the cancelled nodes (:meth:`_stop_tools`). A node
        cancelled so already answers again with nothing listed (a retry); Conflict for an
        ended program or a node that ended otherwise, NotFound for a node the program does
        not have."""
        program = await self.program_of(tenant, program_id)
        if program.state.terminal:
            raise ProgramClosed(program_id, program.state.value)
        node = program.nodes.get(node_id)
        if node is None:
            raise NotFound(f"node {node_id!r} of {program_id!r} not found", field="node_id")
        if node.state.terminal and not node.withdrawn:
            raise Conflict(f"node {node_id!r} is {node.state.value}", field="node_id")
        now = time.time()
        running = {
            n.node_id: n
            for n in (node, *descendants(program, node_id))
            if not n.state.terminal and n.in_flight
        }
        changed = self.controller.cancel_node(program_id, node_id, now, by=by)
        calls = [c for c in self.calls_of(program_id) if c.node_id in running]
        tools = [n for n in running.values() if n.kind is NodeKind.TOOL]

        def stop(read_only: list[str], flagged: list[str]) -> Iterable[str]:
            for listener in self._node_cancel_listeners:
                yield from listener(program_id, read_only)

        interrupted, flagged, running_tools = self._stop_tools(program_id, tools, now, stop)
        self.driver.nodes_cancelled(program_id, [n.node_id for n in tools])
        self.tool_calls.withdraw(program_id, {n.node_id for n in changed})
        actions: list[Action] = [AbortCalls(tuple(c.call_id for c in calls))] if calls else []
        # No CacheHint, unlike a program cancel's ``recompute``: tool-wait retention is per
        # program, not per branch (the SGLang plugin marks the radix path of the program's last
        # call, ``retention.RetentionBook``), so no mark is the cancelled branch's alone. A
        # keep exists only while the program waits on tools alone (its calls release it), and
        # the path it marks ends in the LLM answer that asked for the tools: the program's
        # next call goes on from there (the cancelled tool's result included), so dropping it
        # would cost that call a recompute. It ends as after a tool's normal end: at the
        # program's next call or end, else its deadline; evicted last meanwhile, not never.
        await self.settled(actions)
        cancelled = [n.node_id for n in changed]
        aborted = [c.call_id for c in calls]
        return NodeCancelReport(
            program_id, node_id, cancelled, aborted, interrupted, flagged, running_tools
        )

    def add_node_cancel_listener(self, listener: NodeCancelListener) -> None:
        """Call ``listener(program_id, node_ids)`` on every node cancel, with the nodes whose
        read-only tools the gateway's executors run; it stops those still running and returns
        their nodes (side effects commit)."""
        self._node_cancel_listeners.append(listener)

    def tool_reconciled(
        self, program_id: str, node_id: str, data: Mapping[str, str | bool | None]
    ) -> None:
        """An operator settled the tool call of ``node_id`` left in doubt (``data``: the
        call's key, tool, the action and its intent's new state): a ``tool.reconciled`` event
        for the feed, the program's tenant's when it is in memory (else the operators'
        only, as the Tools view is)."""
        program = self.controller.programs.get(program_id)
        tenant = program.tenant if program is not None else ""
        attempt = 0
        if program is not None and node_id in program.nodes:
            attempt = program.nodes[node_id].attempt
        kind = EventKind.TOOL_RECONCILED
        self.hub.emit(Event(time.time(), kind, program_id, node_id, attempt, tenant, dict(data)))

    async def stop_for_quota(self, program_id: str, error: ServiceError) -> None:
        """Cancel a program that went over a quota; later calls get ``error`` again."""
        self.ended_by.setdefault(program_id, error)
        program = self.controller.programs.get(program_id)
        if program is not None and not program.state.terminal:
            await self.cancel_program(None, program_id, reason=f"quota:{error.field}")

    def add_cancel_listener(self, listener: CancelListener) -> None:
        """Call ``listener(program_id, read_only, flagged)`` on every program cancel, with the
        nodes whose tools the gateway's executors run; it stops the read-only ones still
        running (side effects commit) and returns their nodes."""
        self._cancel_listeners.append(listener)

    # -- LLM calls -------------------------------------------------------------------------------
    async def start_call(
        self, tenant: str, chat: ChatCall, *, gone: ClientGone | None = None
    ) -> LiveCall:
        """Admit a chat call and submit it to the runtime (see :mod:`intake`); ``gone``
        resolves when its client disconnects (watched only while the call waits at the door)."""
        return await self.intake.start(tenant, chat, gone)

    def register(self, call: LiveCall) -> None:
        """Track a call that was just submitted (until its accounting ends it)."""
        self.calls[call.call_id] = call
        self._by_program.setdefault(call.program_id, {})[call.call_id] = call

    def unregister(self, call: LiveCall) -> None:
        """Stop tracking a call that ended."""
        self.calls.pop(call.call_id, None)
        mine = self._by_program.get(call.program_id)
        if mine is not None:
            mine.pop(call.call_id, None)
            if not mine:
                del self._by_program[call.program_id]

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run ``coro`` in the background, keeping a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
