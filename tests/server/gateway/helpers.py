"""Tool bodies and small helpers shared by the gateway tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agentconsole.server.gateway import CallResult, GatewayConfig, ToolDefinition, ToolGateway
from agentconsole.server.gateway.audit import AuditActor
from agentconsole.server.gateway.builtin_tools import read_ledger
from agentconsole.server.store import Store
from tests.server.gateway.fakes import FakePort


def obj(required: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
    """A strict object schema with ``props``."""
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


LEDGER_PARAMS = obj(
    ("account", "amount"),
    account={"type": "string", "maxLength": 64, "pattern": "^[a-z0-9-]+$"},
    amount={"type": "integer", "minimum": 1, "maximum": 1_000_000},
)


def tool_body(name: str, executor: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A registration body; ``fields`` override the defaults (echo-like parameters)."""
    body: dict[str, Any] = {
        "name": name,
        "description": f"test tool {name}",
        "parameters": obj(text={"type": "string", "maxLength": 100}),
        "side_effect": False,
        "idempotent": True,
        "timeout_s": 5.0,
        "executor": executor,
    }
    body.update(fields)
    return body


def raw(value: Any) -> bytes:
    return json.dumps(value).encode()


async def register(
    gateway: ToolGateway, body: dict[str, Any], tenant: str = "t1", operator: bool = False
) -> ToolDefinition:
    return await gateway.register(tenant, operator, raw(body))


async def register_ledger(gateway: ToolGateway, *, idempotent: bool = False) -> ToolDefinition:
    """``ledger`` (no downstream key) or ``keyed_ledger`` (the downstream dedupes)."""
    name = "keyed_ledger" if idempotent else "ledger"
    body = tool_body(
        name,
        {"type": "builtin", "name": name},
        parameters=LEDGER_PARAMS,
        side_effect=True,
        idempotent=idempotent,
    )
    return await register(gateway, body, operator=True)


async def call(
    gateway: ToolGateway,
    port: FakePort,
    tool: str,
    arguments: dict[str, Any],
    *,
    program: str = "p1",
    node: str = "n1",
    tenant: str = "t1",
    attempt: int = 1,
    actor: AuditActor | None = None,
) -> CallResult:
    body = {"program_id": program, "node_id": node, "arguments": arguments, "attempt": attempt}
    return await gateway.call(tenant, tool, raw(body), port, actor=actor)


def applied(ledger: Path) -> dict[str, int]:
    """Applied effects per key in a ledger file."""
    counts: dict[str, int] = {}
    for row in read_ledger(ledger):
        if row.get("applied"):
            key = str(row["key"])
            counts[key] = counts.get(key, 0) + 1
    return counts


@contextlib.asynccontextmanager
async def opened_gateway(db: Path, config: GatewayConfig) -> AsyncIterator[ToolGateway]:
    """A started gateway on a fresh store at ``db``; closed (and the store) at the end."""
    store = Store.open(db)
    gateway = ToolGateway(store, config)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.close()
        store.close()
