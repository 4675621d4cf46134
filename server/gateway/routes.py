"""HTTP routes of the tool gateway, as Litestar controllers wired by dependency injection.

Wiring (``server/app.py``)::

    gateway = ToolGateway(store, GatewayConfig(...))
    app = Litestar(
        route_handlers=[..., *GATEWAY_CONTROLLERS],
        dependencies={**gateway_dependencies(gateway, program_service), "principal": ...},
        on_startup=[gateway.start], on_shutdown=[gateway.close],  # before the store closes
    )

Dependency names the handlers require (none has a default, so a missing one fails at start-up
instead of silently becoming a query parameter):

* ``gateway``: the :class:`ToolGateway`;
* ``program_port``: the :class:`~agentconsole.server.gateway.ports.ReportPort`
  (``ProgramService``);
* ``principal``: the authenticated caller's :class:`~agentconsole.server.api.auth.Principal`
  (its tenant, whether it holds an operator key, and the key id the audit names every caller
  by, tenant keys and operator keys alike, as the core's audit does: :meth:`AuditActor.of`).

Routes: ``POST/GET /v1/tools`` (the listing paged by ``limit`` and ``cursor``),
``DELETE /v1/tools/{name}``, ``POST /v1/tools/{name}/call``,
``POST /v1/programs/{program_id}/tool-calls/start|finish``,
``GET /v1/operator/tool-calls`` and ``POST /v1/operator/tool-calls/{tool_call_id}/reconcile``.
In the app, a write (any route but a read) is refused with 503 while the store's writer is
dead, by the ``principal`` provider (``api/deps.py``), before the gateway sees it. Errors are
answered by the controllers' own handler in the API's error shape; each route's body schema
and statuses for the published contract are in :mod:`.openapi`. Path parameters are checked by
the gateway itself (so its refusals are audited). A tenant key on an operator route is refused
and audited.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency, Provide
from litestar.exceptions import ValidationException
from litestar.params import FromPath, QueryParameter, SkipValidation
from litestar.types import ExceptionHandlersMap

from agentconsole.server.api.auth import Principal
from agentconsole.server.api.errors import handle_error
from agentconsole.server.api.queryguard import PageCursor, strict_query
from agentconsole.server.gateway import openapi
from agentconsole.server.gateway.audit import AuditActor
from agentconsole.server.gateway.errors import Forbidden, GatewayError
from agentconsole.server.gateway.gateway import ToolGateway
from agentconsole.server.gateway.ports import ReportPort
from agentconsole.server.gateway.streams import read_at_most
from agentconsole.server.store import StoreError

Body = dict[str, Any]
Gateway = NamedDependency[SkipValidation[ToolGateway]]
Port = NamedDependency[SkipValidation[ReportPort]]
Caller = NamedDependency[SkipValidation[Principal]]
IntentState = Literal["in_progress", "committed", "failed", "retryable", "needs_reconcile"]


def gateway_error_response(request: Request[Any, Any, Any], exc: Exception) -> Response[Body]:
    """The API error body for a :class:`GatewayError` (its status, ``Retry-After`` etc.);
    a store error as the core routes answer it (503 ``unavailable``, retryable)."""
    if isinstance(exc, GatewayError):
        return Response(exc.body(), status_code=exc.status, headers=exc.headers)
    return handle_error(request, exc)


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    GatewayError: gateway_error_response,
    StoreError: gateway_error_response,
    # path and query parameters: the API's 422, whichever app mounts the controllers
    ValidationException: handle_error,
}


async def read_limited(request: Request[Any, Any, Any], limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the body: enough for the gateway to see it is over the
    cap (and audit it), without buffering an attacker's megabytes."""
    if (request.content_length or 0) > limit:
        return b" " * (limit + 1)
    return await read_at_most(request.stream(), limit)


def gateway_dependencies(gateway: ToolGateway, port: ReportPort) -> dict[str, Provide]:
    """The ``gateway`` and ``program_port`` providers (the app adds ``principal``)."""

    def provide_gateway() -> ToolGateway:
        return gateway

    def provide_port() -> ReportPort:
        return port

    return {
        "gateway": Provide(provide_gateway, use_cache=True, sync_to_thread=False),
        "program_port": Provide(provide_port, use_cache=True, sync_to_thread=False),
    }


class ToolsController(Controller):
    """``/v1/tools``: register, list, delete, call."""

    path = "/v1/tools"
    tags = ("tools",)
    exception_handlers = EXCEPTION_HANDLERS

    @post(
        "/",
        status_code=201,
        summary="Register (or replace) a tool",
        opt=openapi.REGISTER_CONTRACT,
    )
    async def register(
        self, request: Request[Any, Any, Any], gateway: Gateway, principal: Caller
    ) -> Body:
        raw = await read_limited(request, gateway.config.max_body_bytes)
        actor = AuditActor.of(principal)
        definition = await gateway.register(principal.tenant, principal.operator, raw, actor=actor)
        return definition.to_json()

    @get(
        "/",
        summary="Tools the caller may call",
        opt=openapi.LIST_CONTRACT,
        guards=[strict_query],
    )
    async def list_tools(
        self,
        gateway: Gateway,
        principal: Caller,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
        cursor: PageCursor = None,
    ) -> Body:
        """By name (operators: by name, then owner). Paged as ``GET /v1/programs``: pass
        ``cursor`` (the previous answer's ``next_cursor``, null on the last page); a page
        holds at most ``limit`` tools and about 4 MiB of them."""
        tenant, operator = principal.tenant, principal.operator
        page = gateway.tool_page(tenant, operator=operator, limit=limit, cursor=cursor)
        tools = [t.view_for(tenant, operator=operator) for t in page.tools]
        next_cursor = None if page.next_cursor is None else page.next_cursor.encode()
        return {"tools": tools, "next_cursor": next_cursor}

    @delete(
        "/{name:str}",
        status_code=200,
        summary="Delete one of the caller's tools (an operator key: a platform tool)",
        opt=openapi.DELETE_CONTRACT,
    )
    async def delete_tool(self, name: FromPath[str], gateway: Gateway, principal: Caller) -> Body:
        """Answers the deleted ``Tool`` once its delete is durable; calls of it already
        running finish, later ones get 404 ``tool_not_found``."""
        actor = AuditActor.of(principal)
        deleted = await gateway.delete(principal.tenant, principal.operator, name, actor=actor)
        return deleted.view_for(principal.tenant, operator=principal.operator)

    @post(
        "/{name:str}/call",
        status_code=200,
        summary="Call a tool (idempotent by node)",
        opt=openapi.CALL_CONTRACT,
    )
    async def call(
        self,
        request: Request[Any, Any, Any],
        name: FromPath[str],
        gateway: Gateway,
        program_port: Port,
        principal: Caller,
    ) -> Body:
        raw = await read_limited(request, gateway.config.max_body_bytes)
        actor = AuditActor.of(principal)
        return (
            await gateway.call(principal.tenant, name, raw, program_port, actor=actor)
        ).to_json()


class ToolReportsController(Controller):
    """``/v1/programs/{program_id}/tool-calls``: tools the agent runs itself."""

    path = "/v1/programs/{program_id:str}/tool-calls"
    tags = ("tools",)
    exception_handlers = EXCEPTION_HANDLERS

    @post(
        "/start",
        status_code=200,
        summary="The agent starts running a tool",
        opt=openapi.REPORT_STARTED_CONTRACT,
    )
    async def start(
        self,
        request: Request[Any, Any, Any],
        program_id: FromPath[str],
        gateway: Gateway,
        program_port: Port,
        principal: Caller,
    ) -> Body:
        raw = await read_limited(request, gateway.config.max_body_bytes)
        actor = AuditActor.of(principal)
        return await gateway.reports.started(
            principal.tenant, program_id, raw, program_port, actor=actor
        )

    @post(
        "/finish",
        status_code=200,
        summary="The agent's tool ended",
        opt=openapi.REPORT_FINISHED_CONTRACT,
    )
    async def finish(
        self,
        request: Request[Any, Any, Any],
        program_id: FromPath[str],
        gateway: Gateway,
        program_port: Port,
        principal: Caller,
    ) -> Body:
        raw = await read_limited(request, gateway.config.max_body_bytes)
        actor = AuditActor.of(principal)
        return await gateway.reports.finished(
            principal.tenant, program_id, raw, program_port, actor=actor
        )


class ToolOperatorController(Controller):
    """``/v1/operator/tool-calls``: intents for operators, and reconciling them."""

    path = "/v1/operator/tool-calls"
    tags = ("operator",)
    exception_handlers = EXCEPTION_HANDLERS

    @get(
        "/",
        summary="Tool calls by state (needs_reconcile: decisions pending)",
        opt=openapi.INTENTS_CONTRACT,
        guards=[strict_query],
    )
    async def list_calls(
        self,
        gateway: Gateway,
        principal: Caller,
        intent_state: Annotated[IntentState | None, QueryParameter(name="state")] = None,
        program_id: Annotated[
            str | None, QueryParameter(pattern=openapi.ID_PATTERN.pattern)
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
    ) -> Body:
        if not principal.operator:
            error = Forbidden("operator key required")
            actor = AuditActor.of(principal)
            gateway.audit.rejected(actor, "tool.list_calls", "tool_calls", error, {})
            raise error
        return {"tool_calls": await gateway.operations.list(intent_state, program_id, limit)}

    @post(
        "/{tool_call_id:str}/reconcile",
        status_code=200,
        summary="Settle a tool call",
        opt=openapi.RECONCILE_CONTRACT,
    )
    async def reconcile(
        self,
        request: Request[Any, Any, Any],
        tool_call_id: FromPath[str],
        gateway: Gateway,
        principal: Caller,
    ) -> Body:
        actor = AuditActor.of(principal)
        if not principal.operator:
            error = Forbidden("operator key required")
            gateway.audit.rejected(actor, "tool.reconcile", f"tool_call:{tool_call_id}", error, {})
            raise error
        raw = await read_limited(request, gateway.config.max_body_bytes)
        return await gateway.operations.reconcile(actor, tool_call_id, raw)


GATEWAY_CONTROLLERS = (ToolsController, ToolReportsController, ToolOperatorController)
