"""A minimal agentconsole-shaped server for the gateway's HTTP tests: the real gateway routes
and store, a :class:`FakePort` for programs, and a fake chat endpoint for the replayer.

Run as ``python -m tests.server.gateway.mini_server --db D --ledger L`` (from the repository
root): it binds 127.0.0.1 on a free port and prints ``READY <port>`` once it serves.
Keys: ``sk-tenant-{a,b,c,d}`` (tenants ``tenant-a`` ...), ``sk-dev`` (``default``) and
``sk-operator``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from litestar import Litestar, Request, get, post
from litestar.di import NamedDependency, Provide
from litestar.exceptions import NotAuthorizedException, NotFoundException
from litestar.params import FromPath, JSONBody
from litestar.testing import TestClient

from agentconsole.scheduler.program import ToolSpec
from agentconsole.server.api.auth import KeyRing, Principal
from agentconsole.server.api.errors import ApiError
from agentconsole.server.gateway import (
    EXCEPTION_HANDLERS,
    GATEWAY_CONTROLLERS,
    GatewayConfig,
    ToolGateway,
    gateway_dependencies,
)
from agentconsole.server.store import Store
from tests.server.gateway.fakes import FakePort

KEYS: dict[str, tuple[str, bool]] = {
    **{f"sk-tenant-{t}": (f"tenant-{t}", False) for t in "abcd"},
    "sk-dev": ("default", False),
    "sk-operator": ("operator", True),
}
Body = dict[str, Any]
#: the headers the tests send these keys with
TENANT_A = {"Authorization": "Bearer sk-tenant-a"}
TENANT_B = {"Authorization": "Bearer sk-tenant-b"}
OPERATOR = {"Authorization": "Bearer sk-operator"}


#: the server's own key ring over :data:`KEYS`: the gateway's routes get its principals
_KEY_RING = KeyRing(
    {key: tenant for key, (tenant, operator) in KEYS.items() if not operator},
    [key for key, (_, operator) in KEYS.items() if operator],
)


async def _principal(request: Request[Any, Any, Any]) -> Principal:
    try:
        return _KEY_RING.resolve(request.headers.get("authorization"))
    except ApiError as error:  # the ring's 401, in this app's own shape
        raise NotAuthorizedException("bad key") from error


async def _tenant(request: Request[Any, Any, Any]) -> str:
    return (await _principal(request)).tenant


def build_app(store: Store, gateway: ToolGateway, port: FakePort) -> Litestar:
    """The app: gateway controllers plus just enough of the program API for the tests."""

    def owned(program_id: FromPath[str], tenant: NamedDependency[str]) -> None:
        program = port.programs.get(program_id)
        if program is None or program.tenant != tenant:
            raise NotFoundException("program not found")

    @get("/health", sync_to_thread=False)
    def health() -> Body:
        return {"status": "ok"}

    @post("/v1/programs", status_code=201)
    async def create_program(data: JSONBody[Body], tenant: NamedDependency[str]) -> Body:
        program_id = str(data.get("program_id") or f"p-{uuid.uuid4().hex[:12]}")
        quotas = data.get("quotas") or {}
        port.create(tenant, program_id, quotas.get("tool_calls"))
        return {"program_id": program_id, "tenant": tenant, "state": "running"}

    @post("/v1/programs/{program_id:str}/nodes", status_code=201)
    async def add_node(
        program_id: FromPath[str], data: JSONBody[Body], tenant: NamedDependency[str]
    ) -> Body:
        owned(program_id, tenant)
        if data.get("kind") == "tool":
            await port.ensure_tool_node(
                tenant, program_id, str(data["node_id"]), ToolSpec(str(data["tool"]))
            )
        return {"node_id": data["node_id"], "kind": data.get("kind"), "state": "pending"}

    @post("/v1/programs/{program_id:str}/cancel", status_code=200)
    async def cancel(program_id: FromPath[str], tenant: NamedDependency[str]) -> Body:
        owned(program_id, tenant)
        port.programs[program_id].state = "cancelled"
        report = gateway.cancel_program(program_id)
        return {
            "program_id": program_id,
            "state": "cancelled",
            "aborted_calls": [],
            "interrupted_tools": [t.node_id for t in report.interrupted],
            "flagged_tools": [t.node_id for t in report.flagged],
        }

    @post("/v1/programs/{program_id:str}/finish", status_code=200)
    async def finish(program_id: FromPath[str], tenant: NamedDependency[str]) -> Body:
        owned(program_id, tenant)
        port.programs[program_id].state = "finished"
        return {"program_id": program_id, "state": "finished"}

    @get("/v1/programs/{program_id:str}")
    async def get_program(program_id: FromPath[str], tenant: NamedDependency[str]) -> Body:
        owned(program_id, tenant)
        program = port.programs[program_id]
        return {
            "program_id": program_id,
            "tenant": tenant,
            "state": program.state,
            "nodes": [
                {"node_id": n, "kind": "tool", "tool": t.name} for n, t in program.nodes.items()
            ],
        }

    @post("/v1/chat/completions", status_code=200)
    async def chat(
        request: Request[Any, Any, Any], data: JSONBody[Body], tenant: NamedDependency[str]
    ) -> Body:
        program_id = request.headers.get("x-program-id", "inferred")
        if program_id in port.programs:
            owned(program_id, tenant)
        tokens = int(data.get("max_tokens") or 16)
        await asyncio.sleep(min(tokens * 0.0002, 0.2))
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:8]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": data.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": "ok " * tokens},
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
            "agentconsole": {
                "program_id": program_id,
                "node_id": request.headers.get("x-node-id", ""),
                "call_id": "c",
            },
        }

    return Litestar(
        route_handlers=[
            health,
            create_program,
            add_node,
            cancel,
            finish,
            get_program,
            chat,
            *GATEWAY_CONTROLLERS,
        ],
        dependencies={
            **gateway_dependencies(gateway, port),
            "principal": Provide(_principal),
            "tenant": Provide(_tenant),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        on_startup=[gateway.start],
        on_shutdown=[gateway.close, lambda: store.close()],
    )


@contextlib.contextmanager
def in_process(
    db: Path, config: GatewayConfig
) -> Iterator[tuple[TestClient[Litestar], ToolGateway, FakePort]]:
    """The app in-process over a fresh store at ``db``: its HTTP client, the gateway and the
    fake port behind it. The app's shutdown closes the gateway and the store."""
    store = Store.open(db)
    gateway = ToolGateway(store, config)
    port = FakePort()
    with TestClient(build_app(store, gateway, port)) as http:
        yield http, gateway, port


def serve_on_free_port(app: Litestar) -> None:
    """Serve ``app`` on 127.0.0.1 and a free port; print ``READY <port>`` once listening.

    uvicorn binds the port itself: a socket made here with ``proto`` 0 would make asyncio skip
    ``TCP_NODELAY`` on accepted connections (+40 ms per keep-alive request)."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", backlog=2048, timeout_keep_alive=30
    )
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task
            await asyncio.sleep(0.01)
        print("READY", server.servers[0].sockets[0].getsockname()[1], flush=True)
        await task

    asyncio.run(serve())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    args = parser.parse_args()
    store = Store.open(args.db)
    config = GatewayConfig(
        ledger_path=args.ledger, tenant_builtins=None, allow_private_executor_urls=True
    )
    gateway = ToolGateway(store, config)
    app = build_app(store, gateway, FakePort())
    serve_on_free_port(app)


if __name__ == "__main__":
    main()
