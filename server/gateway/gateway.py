"""The tool gateway: registration, listing, and the call pipeline in its fixed order.

``call`` runs, in this order (research §3.4): body size cap -> tool allowlist (exact name; a
tool the tenant may not use is unknown to it, 404 as a name nobody registered) -> authz (the
program is the tenant's) -> per-tenant+tool rate limit and concurrency cap -> JSON-Schema
validation -> semantic validators -> program/node bookkeeping and the tool-call quota ->
idempotency claim -> execute with timeout -> commit (epoch-fenced) -> event (through the
program port). Authentication happened before (the app hands in the tenant). Every refusal
is audited (within the server's refusal budget, :mod:`.audit`) and answered with a 4xx before
the executor is reached; :mod:`.runner` documents what is and is not exactly-once.

Two exceptions to the order: a retry on a program that no longer runs (or on a node that was
cancelled) is answered from the store when its key committed (replayed whatever the program's
state, seed §12) or is in doubt (its ``needs_reconcile`` refusal, as on a running program), and
a tenant's
``http`` tool whose host resolves to a non-public address is refused at connect time by the
egress policy (:mod:`.egress`), answered 424 ``egress_refused`` and audited as a refusal.
A cancel that lands while a call goes down the pipeline is answered as one before it: 409
``program_not_running`` (:func:`.ports.ended_refusal`), never the port's generic ``conflict``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import httpx
from jsonschema.exceptions import best_match

from agentconsole.server.gateway.audit import AuditActor, Auditor
from agentconsole.server.gateway.builtin_tools import builtin_functions
from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.definition import ToolDefinition
from agentconsole.server.gateway.egress import (
    HTTP_CONNECTIONS,
    HTTP_CONNECTIONS_PER_TENANT,
    guarded_client,
)
from agentconsole.server.gateway.errors import (
    EgressRefused,
    Forbidden,
    GatewayError,
    InProgress,
    InvalidArguments,
    InvalidRequest,
    RateLimited,
    ToolFailed,
    ToolNotFound,
)
from agentconsole.server.gateway.executors import (
    Executor,
    HttpExecutor,
    Invocation,
    SandboxExecutor,
)
from agentconsole.server.gateway.limits import ToolLimits
from agentconsole.server.gateway.operations import ToolOperations
from agentconsole.server.gateway.outcome import CallResult
from agentconsole.server.gateway.ports import (
    NodeWithdrawn,
    ProgramPort,
    StoredBytes,
    ended_refusal,
    not_running,
    port_errors,
    program_ended,
)
from agentconsole.server.gateway.registration import (
    Registrant,
    is_tool_name,
    parse_registration,
)
from agentconsole.server.gateway.registry import CompiledTool, ToolPage, ToolRegistry
from agentconsole.server.gateway.reports import AgentReports
from agentconsole.server.gateway.request import CallRequest, parse_body, parse_call
from agentconsole.server.gateway.runner import (
    CancelReport,
    Job,
    Release,
    Runner,
    RunningTool,
    call_hash,
    in_doubt,
)
from agentconsole.server.gateway.sandbox import Sandbox, SandboxUnavailable
from agentconsole.server.gateway.schema_rules import check_parameters_schema
from agentconsole.server.gateway.semantic import check_arguments
from agentconsole.server.gateway.slots import FairSlots
from agentconsole.server.gateway.toolcursor import ToolCursor
from agentconsole.server.refusals import RefusalBudget
from agentconsole.server.store import IntentState, Store, make_tool_call_id
from agentconsole.server.store.jsonutil import JSONValue


class _Builtin:
    """An in-process builtin as an :class:`Executor`."""

    def __init__(self, fn: Callable[[Invocation], Awaitable[JSONValue]]) -> None:
        self._fn = fn

    async def run(self, invocation: Invocation) -> JSONValue:
        return await self._fn(invocation)


class ToolGateway:
    """One per ``serve`` process. Build, ``await start()``, serve, ``await close()``.

    ``http_client`` carries the calls of ``http`` tools that may reach private addresses
    (platform tools); the others always go through the gateway's own client under the
    egress policy. ``refusals`` is the server's budget of audited refusals (see
    :mod:`.audit`); without one the gateway keeps its own. ``stored``: the tenants'
    stored-bytes budgets, which count their tool definitions (none: not counted).
    """

    def __init__(
        self,
        store: Store,
        config: GatewayConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        http_client: httpx.AsyncClient | None = None,
        sandbox: Sandbox | None = None,
        refusals: RefusalBudget | None = None,
        stored: StoredBytes | None = None,
    ) -> None:
        self.config = config or GatewayConfig()
        self.sandbox = sandbox or Sandbox(self.config.sandbox)
        self.store = store
        self.registry = ToolRegistry(store, stored, self.config.tool_bounds)
        self.limits = ToolLimits(clock)
        #: tool-call keys admitted and not yet released: a duplicate of one (a transport
        #: retry) attaches to it, so it takes no rate token or concurrency slot of its own
        self._admitted_keys: set[str] = set()
        self.audit = Auditor(store.writer, refusals)
        self.runner = Runner(store.intents, self.config)
        self._builtins = builtin_functions(self.config.ledger_path)
        self._http = http_client
        self._own_http = http_client is None
        self._guarded: httpx.AsyncClient | None = None
        # each client's pool shared between tenants: one tenant's calls to a downstream that
        # never answers held all 100 connections, and every other tenant's http tool timed out
        self._http_slots = FairSlots(HTTP_CONNECTIONS, HTTP_CONNECTIONS_PER_TENANT)
        self._guarded_slots = FairSlots(HTTP_CONNECTIONS, HTTP_CONNECTIONS_PER_TENANT)
        self.reports = AgentReports(self.registry, self.audit, self.config, self._committed)
        self.operations = ToolOperations(store, self.audit, self.config)

    async def start(self) -> int:
        """Load the registered tools; returns how many."""
        timeout = self.config.max_timeout_s
        if self._http is None:
            # redirects are not followed (httpx's default, kept explicit): a 3xx is the answer
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=False)
        if self._guarded is None:
            self._guarded = guarded_client(timeout)
        loaded = await asyncio.to_thread(self.registry.load)
        self.registry.charge_loaded()  # on the loop, where the tenants' budgets live
        return loaded

    def shut_down(self) -> None:
        """The server begins to stop: answer the calls in flight now (503, retryable) and
        refuse new ones; :meth:`close` follows. See :meth:`Runner.shut_down`."""
        self.runner.shut_down()

    async def close(self, timeout: float = 10.0) -> None:
        """Let running calls finish (read-only ones are interrupted), then release the HTTP
        client. Does not close the store."""
        await self.runner.close(timeout)
        if self._http is not None and self._own_http:
            await self._http.aclose()
        if self._guarded is not None:
            await self._guarded.aclose()

    async def _committed(self) -> None:
        """Wait until everything handed to the store so far has committed (both lanes)."""
        await asyncio.wrap_future(self.store.writer.flush())

    # ------------------------------------------------------------------ registry
    async def register(
        self, tenant: str, operator: bool, raw: bytes, *, actor: AuditActor | None = None
    ) -> ToolDefinition:
        """Register (or replace) a tool from a ``POST /v1/tools`` body; an operator's is
        platform-wide. Raises (and audits) :class:`InvalidTool` or :class:`InvalidRequest`,
        and :class:`TenantLimitReached` past the tenant's bounds on its tools (``registry``).
        ``actor``: whom the audit names (the routes pass the key's, :meth:`AuditActor.of`);
        by default the tenant."""
        actor = actor or AuditActor.of_tenant(tenant, operator)
        try:
            body = parse_body(raw, self.config.max_body_bytes)
            definition = parse_registration(
                body,
                Registrant(tenant, operator),
                self.config,
                frozenset(self._builtins),
                time.time(),
                self.sandbox.config,
            )
            validator = check_parameters_schema(body.get("parameters"))
            if definition.executor.type == "sandbox":
                reason = await self.sandbox.unavailable()
                if reason is not None:
                    raise SandboxUnavailable(
                        f"sandbox tools cannot run on this server: {reason}",
                        field="executor/type",
                    )
            definition = await self.registry.register(
                _with_schema(definition, validator.schema), validator
            )
        except GatewayError as error:
            self.audit.rejected(actor, "tool.register", "tool", error, {})
            raise
        self.audit.record(
            actor,
            "tool.register",
            f"tool:{definition.name}",
            "ok",
            {
                "owner": definition.tenant,
                "side_effect": definition.side_effect,
                "idempotent": definition.idempotent,
                "executor": definition.executor.type,
            },
        )
        return definition

    async def delete(
        self, tenant: str, operator: bool, name: str, *, actor: AuditActor | None = None
    ) -> ToolDefinition:
        """Delete a tool for ``DELETE /v1/tools/{name}``: a tenant key deletes its own tool,
        an operator key the platform's. Returns the deleted definition once its delete is
        durable. Raises (and audits) :class:`ToolNotFound` for a name the caller owns no
        tool of (another tenant's tool answers as an unknown name, as a call does), and
        :class:`Forbidden` for a platform tool a tenant sees. Calls already running finish;
        every later call of the name is answered as for a name nobody registered."""
        actor = actor or AuditActor.of_tenant(tenant, operator)
        owner = "" if operator else tenant
        try:
            deleted = await self.registry.delete(owner, name) if is_tool_name(name) else None
            if deleted is None:
                if not operator and self.registry.resolve(tenant, name) is not None:
                    raise Forbidden(
                        f"tool {name!r} is a platform tool: only an operator key deletes it",
                        field="name",
                    )
                raise ToolNotFound(f"no tool named {name[:64]!r} to delete", field="name")
        except GatewayError as error:
            self.audit.rejected(actor, "tool.delete", f"tool:{name}", error, {})
            raise
        self.audit.record(
            actor, "tool.delete", f"tool:{deleted.name}", "ok", {"owner": deleted.tenant}
        )
        self.limits.tool_deleted(deleted.tenant, deleted.name)  # its buckets: no memory left
        return deleted

    def tools(self, tenant: str, *, operator: bool) -> list[ToolDefinition]:
        """The tools ``tenant`` may see and call (operators: all)."""
        return self.registry.visible(tenant, operator=operator)

    def tool_page(self, tenant: str, *, operator: bool, limit: int, cursor: str | None) -> ToolPage:
        """One page of :meth:`tools`: at most ``limit`` after ``cursor`` (a page's
        ``next_cursor``; :class:`InvalidRequest` when it is not one)."""
        after = None if cursor is None else ToolCursor.decode(cursor)
        return self.registry.page(tenant, operator=operator, after=after, limit=limit)

    # ------------------------------------------------------------------ call
    async def call(
        self,
        tenant: str,
        name: str,
        raw: bytes,
        port: ProgramPort,
        *,
        actor: AuditActor | None = None,
    ) -> CallResult:
        """Run the pipeline for ``POST /v1/tools/{name}/call``; see the module docstring.

        Returns the committed or replayed result. Raises a :class:`GatewayError`: a 4xx
        refusal (audited as ``actor``, by default the tenant, and the executor was not
        reached) or a 424 for a tool that failed.
        """
        actor = actor or AuditActor.of_tenant(tenant)
        context: dict[str, str] = {}
        try:
            request = parse_call(parse_body(raw, self.config.max_body_bytes))
            context = {"program_id": request.program_id, "node_id": request.node_id}
            compiled = self._allowed_tool(tenant, name)
            try:
                async with port_errors():
                    await port.check_program(tenant, request.program_id)
            except GatewayError as refusal:
                if not program_ended(refusal):
                    raise
                replayed = await self._replay_ended(compiled.definition, request, port)
                if replayed is None:  # the port's own error stays the cause
                    raise not_running(refusal) from refusal.__cause__
                return replayed
            tool = compiled.definition
            key = make_tool_call_id(request.program_id, request.node_id, request.attempt)
            duplicate = key in self._admitted_keys
            if not duplicate:
                try:
                    self.limits.admit(
                        tenant,
                        tool.name,
                        owner=tool.tenant,
                        rate_per_s=tool.rate_limit_per_s,
                        burst=tool.burst,
                        max_concurrency=tool.max_concurrency,
                    )
                except RateLimited:
                    # a retry of a call that ran runs nothing: its stored answer, not a 429
                    # (an agent that lost the answer must learn what the effect did)
                    replayed = await self._replay_ended(
                        tool, request, port, ended="the tool is at its limits"
                    )
                    if replayed is None:
                        raise
                    return replayed
                self._admitted_keys.add(key)
        except GatewayError as error:
            self.audit.rejected(actor, "tool.call", f"tool:{name}", error, context)
            raise
        released = duplicate  # (a duplicate holds nothing to give back)

        def release(*, ran: bool = True) -> None:
            nonlocal released
            if not released:
                released = True
                self._admitted_keys.discard(key)
                self.limits.release(tenant, tool.name, owner=tool.tenant, ran=ran)

        try:
            job = await self._prepare(tenant, compiled, request, port, release)
        except GatewayError as error:
            release()
            try:
                if isinstance(error.__cause__, NodeWithdrawn):
                    # a retry of a call on its cancelled node is answered from the store, as
                    # on a cancelled program: its agent must learn what the effect did
                    ended = "its node was cancelled"
                    replayed = await self._replay_ended(tool, request, port, ended=ended)
                    if replayed is not None:
                        return replayed
                raise
            except GatewayError as answer:
                self.audit.rejected(actor, "tool.call", f"tool:{name}", answer, context)
                raise
        except BaseException:
            release()
            raise
        try:
            async with port_errors():
                return await self.runner.run(job)
        except EgressRefused as error:  # nothing was sent: a refusal, if found at connect time
            self.audit.rejected(actor, "tool.call", f"tool:{name}", error, context)
            raise
        except ToolFailed:
            raise  # an execution outcome, not a refusal
        except GatewayError as error:
            self.audit.rejected(actor, "tool.call", f"tool:{name}", error, context)
            raise

    async def _replay_ended(
        self,
        tool: ToolDefinition,
        request: CallRequest,
        port: ProgramPort,
        *,
        ended: str = "the program has ended",
    ) -> CallResult | None:
        """The answer to a retry on a program that no longer runs (or on a node cancelled, or
        past the tool's rate or concurrency limit, ``ended`` saying which in the in-progress
        answer): its committed result
        (replayed, seed §12), 409 ``in_progress`` while the call it retries still runs (a
        side effect finishes after a cancel), or the 409 ``needs_reconcile`` of a call in doubt,
        as on a running program (its agent must learn that the effect may have happened: the
        program's end settles nothing). ``None`` (the caller refuses the call) for a key never
        called, called with other arguments, or in any other state. Changes nothing in the
        store; the program's ownership was checked by ``check_program``."""
        key = make_tool_call_id(request.program_id, request.node_id, request.attempt)
        record = await asyncio.to_thread(self.store.repo.get_intent, key)
        if record is None or record.params_hash != call_hash(tool, request.arguments):
            return None
        if record.state is IntentState.IN_PROGRESS:
            raise InProgress(
                f"{ended} but this call is still running; retry later for its result",
                extra={"tool_call_id": key},
            )
        if record.state is IntentState.NEEDS_RECONCILE:
            raise in_doubt(key, record.error)
        if record.state is not IntentState.COMMITTED:
            return None
        claim = await asyncio.wrap_future(self.store.intents.attach(key))  # final: at once
        if claim is None:
            return None
        return await self.runner.replayed(request, port, claim)

    def _allowed_tool(self, tenant: str, name: str) -> CompiledTool:
        # a tool hidden from the tenant answers as an unknown one: a 403 would tell it exists
        compiled = self.registry.resolve(tenant, name)
        if compiled is None:
            raise ToolNotFound(f"no tool named {name[:64]!r}", field="name")
        if compiled.definition.executor.type == "agent":
            raise InvalidRequest(
                f"tool {name!r} is run by the agent itself: report it with"
                " /v1/programs/{id}/tool-calls/start and /finish"
            )
        return compiled

    async def _prepare(
        self,
        tenant: str,
        compiled: CompiledTool,
        request: CallRequest,
        port: ProgramPort,
        release: Release,
    ) -> Job:
        error = best_match(compiled.validator.iter_errors(request.arguments))
        if error is not None:
            pointer = "/".join(str(p) for p in error.absolute_path)
            raise InvalidArguments(
                error.message[:300],
                field=f"arguments/{pointer}".rstrip("/"),
                rule=str(error.validator),
            )
        check_arguments(request.arguments)
        tool = compiled.definition
        try:
            async with port_errors():
                await port.ensure_tool_node(
                    tenant, request.program_id, request.node_id, tool.spec()
                )
        except GatewayError as refusal:  # a cancel since ``check_program``: as if before it
            answer = ended_refusal(refusal)
            raise answer from refusal.__cause__  # the port's own error stays the cause
        return Job(tool, self._executor(tool), tenant, request, port, release)

    def _executor(self, tool: ToolDefinition) -> Executor:
        spec = tool.executor
        client = self._http_client(tool)
        if spec.type == "http" and spec.url is not None and client is not None:
            slots = self._guarded_slots if client is self._guarded else self._http_slots
            return HttpExecutor(spec.url, client, self.config.max_result_bytes, slots)
        if spec.type == "builtin" and spec.name in self._builtins:
            return _Builtin(self._builtins[spec.name])
        if spec.type == "sandbox" and spec.sandbox is not None:
            return SandboxExecutor(self.sandbox, spec.sandbox)
        raise ToolNotFound(f"tool {tool.name!r} has no executor available in this server")

    def _http_client(self, tool: ToolDefinition) -> httpx.AsyncClient | None:
        """The client for ``tool``'s calls: under the egress policy unless the tool may reach
        private addresses (decided now, by today's settings, not at registration)."""
        if self.config.private_urls_allowed(platform=not tool.tenant):
            return self._http
        return self._guarded

    # ------------------------------------------------------------------ cancel / observe
    def cancel_program(self, program_id: str) -> CancelReport:
        """Interrupt the program's running read-only tools and flag its side-effecting ones
        (they finish and commit). For ``ProgramService.cancel``."""
        return self.runner.cancel_program(program_id)

    def running(self) -> list[RunningTool]:
        """Tool executions in flight."""
        return self.runner.running()


def _with_schema(definition: ToolDefinition, schema: object) -> ToolDefinition:
    return replace(definition, parameters=schema if isinstance(schema, dict) else {})
