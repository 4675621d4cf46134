"""The gateway as an extension of the server app (``server.app.Extension``).

Mount it with ``create_app(config, extensions=[GatewayExtension(GatewayConfig(...))])``: it
adds the gateway's controllers and the ``gateway``/``program_port`` providers (the app
provides ``principal``), builds the :class:`ToolGateway` on the live store once the app has
started (its refusals audited within the operator desk's budget, its tenants' tool
definitions counted in their stored bytes), answers cancels of the program service
(read-only tools interrupted, side effects left to commit) and closes the gateway before the
store closes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from litestar.di import Provide
from litestar.types import ControllerRouterHandler

from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.errors import GatewayError
from agentconsole.server.gateway.gateway import ToolGateway
from agentconsole.server.gateway.ports import ReportPort, StoredBytes
from agentconsole.server.gateway.routes import GATEWAY_CONTROLLERS
from agentconsole.server.refusals import RefusalBudget
from agentconsole.server.store import IntentRecord, Store

#: ``(program_id, read_only, flagged)`` -> the nodes whose tools the gateway stopped
CancelListener = Callable[[str, list[str], list[str]], list[str]]


class ProgramServiceLike(Protocol):
    """The program core as the extension needs it: its port, and cancel notifications."""

    @property
    def tools(self) -> ReportPort:
        """The port the gateway calls (tool nodes, permission checks, tool start and end)."""

    def add_cancel_listener(self, listener: CancelListener) -> None:
        """Call ``listener(program_id, read_only, flagged)`` on every program cancel: the
        program's read-only tools are to stop; it returns the nodes whose tools it stopped."""

    def tool_reconciled(
        self, program_id: str, node_id: str, data: Mapping[str, str | bool | None]
    ) -> None:
        """An operator settled a tool call in doubt: the event feed says so."""

    def add_node_cancel_listener(self, listener: Callable[[str, list[str]], list[str]]) -> None:
        """Call ``listener(program_id, node_ids)`` on every node cancel: the read-only tools
        of those nodes are to stop; it returns the nodes whose tools it stopped."""

    @property
    def tenants(self) -> StoredBytes:
        """The tenants' budgets, whose stored bytes count their tool definitions."""


class OperatorDeskLike(Protocol):
    """The operator desk as the extension needs it: the server's budget of audited refusals,
    which the gateway's refusals share with the core's."""

    @property
    def refusals(self) -> RefusalBudget: ...


class LiveLike(Protocol):
    """The app's live objects as far as the gateway uses them."""

    @property
    def store(self) -> Store: ...

    @property
    def service(self) -> ProgramServiceLike: ...

    @property
    def desk(self) -> OperatorDeskLike: ...


class GatewayUnavailable(GatewayError):
    """A request arrived before start-up finished (or after shutdown began)."""

    status, type = 503, "unavailable"


class GatewayExtension:
    """Mounts the tool gateway; see the module docstring."""

    route_handlers: Sequence[ControllerRouterHandler] = GATEWAY_CONTROLLERS

    def __init__(self, config: GatewayConfig | None = None) -> None:
        self.config = config or GatewayConfig()
        self.gateway: ToolGateway | None = None
        self._port: ReportPort | None = None

    def dependencies(self) -> Mapping[str, Provide]:
        """``gateway`` and ``program_port``, resolved per request (they exist once started)."""
        return {
            "gateway": Provide(self._provide_gateway, sync_to_thread=False),
            "program_port": Provide(self._provide_port, sync_to_thread=False),
        }

    def _provide_gateway(self) -> ToolGateway:
        if self.gateway is None:
            raise GatewayUnavailable("the tool gateway is not running")
        return self.gateway

    def _provide_port(self) -> ReportPort:
        if self._port is None:
            raise GatewayUnavailable("the tool gateway is not running")
        return self._port

    async def start(self, live: LiveLike) -> None:
        """Build the gateway on the live store and load the registered tools; its refusals
        are audited within the core's budget (one flood cannot get twice the rows), and the
        tenants' stored bytes count their tools."""
        gateway = ToolGateway(
            live.store, self.config, refusals=live.desk.refusals, stored=live.service.tenants
        )
        await gateway.start()
        live.service.add_cancel_listener(self._cancelled)
        live.service.add_node_cancel_listener(self._nodes_cancelled)
        service = live.service

        def reconciled(record: IntentRecord, action: str) -> None:
            data = {
                "tool_call_id": record.tool_call_id,
                "tool": record.tool,
                "action": action,
                "state": record.state.value,
                "side_effect": record.side_effect,
            }
            service.tool_reconciled(record.program_id, record.node_id, data)

        gateway.operations.reconciled = reconciled
        self._port = live.service.tools
        self.gateway = gateway

    def _cancelled(self, program_id: str, read_only: list[str], flagged: list[str]) -> list[str]:
        """Stop the program's read-only runs (its side effects run on to their commit); the
        nodes (the core's ids) really stopped: a run that already ended, its result
        committing, or has not begun, is not."""
        if self.gateway is None:
            return []
        stopped = self.gateway.cancel_program(program_id).interrupted
        return [info.core_node_id for info in stopped]

    def _nodes_cancelled(self, program_id: str, node_ids: list[str]) -> list[str]:
        """Stop the read-only runs of ``node_ids``; the nodes (the core's ids) really stopped:
        a run that already ended, or has not begun, is not."""
        if self.gateway is None or not node_ids:
            return []
        stopped = self.gateway.runner.cancel_nodes(program_id, node_ids)
        return [info.core_node_id for info in stopped]

    def shut_down(self) -> None:
        """The server begins to stop: answer the tool calls in flight (503, retryable) before
        the HTTP server waits for their connections; :meth:`stop` follows."""
        if self.gateway is not None:
            self.gateway.shut_down()

    async def stop(self) -> None:
        """Let running calls commit (read-only ones are interrupted); the store stays open."""
        gateway, self.gateway = self.gateway, None
        if gateway is not None:
            await gateway.close()
