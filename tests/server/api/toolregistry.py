"""What the tests of the tool registry's tenant bounds and of ``DELETE /v1/tools`` share: an
echo tool's body, a server whose gateway has the bounds a test sets, and a tenant's stored
bytes as its limit counts them."""

from __future__ import annotations

import time
from typing import Any

from agentconsole.server.api.config import ServerConfig
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from agentconsole.server.gateway.toolbounds import ToolBounds
from tests.server.api.harness import LiveServer
from tests.server.gateway.helpers import tool_body

ECHO = {"type": "builtin", "name": "echo"}


def echo_tool(name: str, description: str = "", **fields: Any) -> dict[str, Any]:
    """The body registering ``name`` as the builtin echo (its description says its name)."""
    return tool_body(name, ECHO, description=description or f"tool {name}", **fields)


def bounded_server(
    config: ServerConfig, bounds: ToolBounds | None = None
) -> tuple[LiveServer, GatewayExtension]:
    """A server with the gateway mounted (any builtin for tenants, the tool bounds given),
    and the extension (its gateway once started)."""
    gateway = GatewayConfig(tenant_builtins=None, tool_bounds=bounds or ToolBounds())
    extension = GatewayExtension(gateway)
    return LiveServer(config, extensions=[extension]), extension


def stored_bytes(live: LiveServer, tenant: str = "tenant-a") -> int:
    """``tenant``'s stored bytes as its limit counts them (read on the server's loop: a
    tenant with no program yet has no row in ``GET /v1/tenants``)."""

    async def read() -> int:
        return live.live.service.tenants.usage(tenant, time.time())["stored_bytes"]

    return live.run(read())
