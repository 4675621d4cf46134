"""A stub of ``agentconsole serve`` for the console tests: the API.md endpoints the consoles use.

Serves a :class:`StubWorld` over real HTTP (Litestar on uvicorn, loopback, a free port), with
bearer-key auth (an operator key, and a tenant key refused the operator routes with 403), the
SSE feed (``batch`` every 100 ms when there is news, ``overview`` every second) and the
browser console mounted exactly as the real server mounts it. ``live=True`` ticks the world in
the background so the feed carries a steady stream of events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import uvicorn
from litestar import Litestar, Request, Response, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from agentconsole.ui.web.routes import console_routes
from tests.ui.stub_world import StubWorld

OPERATOR_KEY = "sk-operator"
#: sees what the operator sees except ``/v1/operator/*`` (the stub's world is not scoped)
TENANT_KEY = "sk-tenant-a"
OPEN_PATHS = ("/health", "/static/")


def _error(status: int, kind: str, message: str) -> Response[Any]:
    return Response({"error": {"type": kind, "message": message}}, status_code=status)


def build_app(world: StubWorld, *, live: bool = False, tick_steps: int = 5) -> Litestar:
    """The stub Litestar app over ``world``."""

    async def check_key(request: Request[Any, Any, Any]) -> Response[Any] | None:
        path = request.url.path
        if path == "/" or path.startswith(OPEN_PATHS):
            return None
        authorization = request.headers.get("authorization")
        if authorization == f"Bearer {TENANT_KEY}" and path.startswith("/v1/operator/"):
            # as the server, a refused operator call is an audit row
            world.note_refusal(path)
            return _error(403, "forbidden", "this action needs an operator key")
        if authorization not in (f"Bearer {OPERATOR_KEY}", f"Bearer {TENANT_KEY}"):
            return _error(401, "unauthorized", "missing or unknown API key")
        return None

    @get("/health", sync_to_thread=False)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @get("/v1/overview", sync_to_thread=False)
    def overview() -> dict[str, Any]:
        return world.overview_json()

    @get("/v1/programs", sync_to_thread=False)
    def programs(
        program_state: Annotated[str | None, QueryParameter(name="state")] = None,
        tenant: FromQuery[str | None] = None,
        limit: FromQuery[int] = 100,
        offset: FromQuery[int] = 0,
        cursor: FromQuery[str | None] = None,
    ) -> Response[Any]:
        try:
            return Response(world.list_json(program_state, tenant, limit, offset, cursor))
        except ValueError as error:
            return _error(422, "invalid_request", str(error))

    @get("/v1/programs/{program_id:str}", sync_to_thread=False)
    def program(program_id: FromPath[str]) -> Response[Any]:
        body = world.program_json(program_id)
        if body is None:
            return _error(404, "not_found", f"no program {program_id}")
        return Response(body)

    @get("/v1/tenants", sync_to_thread=False)
    def tenants() -> dict[str, Any]:
        return world.tenants_json()

    @get("/v1/kv", sync_to_thread=False)
    def kv() -> dict[str, Any]:
        return world.kv_json()

    @get("/v1/operator/door", sync_to_thread=False)
    def door() -> dict[str, Any]:
        return world.door_json()

    @get("/v1/operator/audit", sync_to_thread=False)
    def audit(limit: FromQuery[int] = 100) -> dict[str, Any]:
        return world.audit_json(limit)

    @get("/v1/operator/tool-calls", sync_to_thread=False)
    def tool_calls(
        intent_state: Annotated[str | None, QueryParameter(name="state")] = None,
        limit: FromQuery[int] = 100,
    ) -> Any:
        # ``state`` is Litestar's reserved name: the query parameter is renamed, as the server's
        return world.tool_calls_json(intent_state, limit)

    @post("/v1/operator/programs/{program_id:str}/{action:str}", sync_to_thread=False)
    def act(
        program_id: FromPath[str],
        action: FromPath[str],
        data: JSONBody[dict[str, Any] | None] = None,
    ) -> Response[Any]:
        if action not in ("preempt", "cancel", "boost"):
            return _error(404, "not_found", f"no action {action}")
        status, body = world.act(action, program_id, data or {})
        return Response(body, status_code=status)

    @post("/v1/programs/{program_id:str}/cancel", sync_to_thread=False)
    def cancel(program_id: FromPath[str]) -> Response[Any]:
        # the stub's tenant key sees every program (its world is not scoped): a cancel here
        # is the same cancel with either key, as the server's is for a tenant's own program
        status, body = world.act("cancel", program_id, {})
        return Response(body, status_code=status)

    @post("/v1/programs/{program_id:str}/nodes/{node_id:str}/cancel", sync_to_thread=False)
    def cancel_node(
        request: Request[Any, Any, Any], program_id: FromPath[str], node_id: FromPath[str]
    ) -> Response[Any]:
        # as the server: an operator key's cancel is the operator's (audited), a tenant's is
        # its own (the stub's world is not scoped: the tenant key sees every program)
        operator = request.headers.get("authorization") == f"Bearer {OPERATOR_KEY}"
        status, body = world.cancel_node(program_id, node_id, operator=operator)
        return Response(body, status_code=status)

    @post(
        "/v1/operator/programs/{program_id:str}/nodes/{node_id:str}/cancel",
        sync_to_thread=False,
    )
    def operator_cancel_node(program_id: FromPath[str], node_id: FromPath[str]) -> Response[Any]:
        status, body = world.cancel_node(program_id, node_id)
        return Response(body, status_code=status)

    @get("/v1/operator/policy", sync_to_thread=False)
    def policy_choices() -> dict[str, Any]:
        return world.policy_choices_json()

    @get("/v1/whoami", sync_to_thread=False)
    def whoami(request: Request[Any, Any, Any]) -> Response[Any]:
        if not world.publishes_whoami:  # a server from before the route
            return _error(404, "not_found", "no route /v1/whoami")
        tenant = request.headers.get("authorization") == f"Bearer {TENANT_KEY}"
        if tenant:
            return Response({"tenant": "tenant-a", "operator": False, "key_id": "key-tenant-a"})
        return Response({"tenant": "operator", "operator": True, "key_id": "operator-stub"})

    @post("/v1/operator/policy", sync_to_thread=False)
    def policy(data: JSONBody[dict[str, Any]]) -> Response[Any]:
        status, body = world.set_policy(data)
        return Response(body, status_code=status)

    @post("/v1/operator/drain", sync_to_thread=False)
    def drain(data: JSONBody[dict[str, Any]]) -> dict[str, Any]:
        world.draining = bool(data.get("enabled"))
        return {"draining": world.draining}

    @get("/v1/events")
    async def events(since: FromQuery[int | None] = None) -> ServerSentEvent:
        # the start point is fixed before the headers go out, so nothing emitted after the
        # client sees the 200 can be missed
        start = world.events_after(None)[0] if since is None else since
        return ServerSentEvent(_feed(world, start))

    @post("/stub/tick", sync_to_thread=False)
    def burst(data: JSONBody[dict[str, Any]]) -> dict[str, Any]:
        """Test-only: advance the world now (a burst of events for the benchmark)."""
        for _ in range(int(data.get("times", 1))):
            world.tick(0.01, int(data.get("steps", 100)))
        return {"seq": world.seq}

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.1)
            world.tick(0.1, tick_steps)

    tasks: list[asyncio.Task[None]] = []

    async def start() -> None:
        if live:
            tasks.append(asyncio.create_task(ticker()))

    async def stop() -> None:
        for task in tasks:
            task.cancel()

    return Litestar(
        route_handlers=[
            health,
            overview,
            programs,
            program,
            tenants,
            kv,
            door,
            audit,
            tool_calls,
            act,
            cancel,
            cancel_node,
            operator_cancel_node,
            policy,
            policy_choices,
            whoami,
            drain,
            events,
            burst,
            *console_routes(),
        ],
        before_request=check_key,
        on_startup=[start],
        on_shutdown=[stop],
    )


async def _feed(world: StubWorld, last: int) -> AsyncIterator[ServerSentEventMessage]:
    next_overview = 0.0
    while True:
        last, batch = world.events_after(last)
        if batch:
            yield ServerSentEventMessage(
                event="batch", data=json.dumps({"seq": last, "events": batch})
            )
        if time.monotonic() >= next_overview:
            next_overview = time.monotonic() + 1.0
            yield ServerSentEventMessage(event="overview", data=json.dumps(world.overview_json()))
        await asyncio.sleep(0.1)


@dataclass(slots=True)
class RunningStub:
    """A stub server running on a loopback port."""

    url: str
    world: StubWorld
    key: str = OPERATOR_KEY


@contextlib.contextmanager
def serve_stub(
    world: StubWorld | None = None, *, live: bool = False, tick_steps: int = 5
) -> Iterator[RunningStub]:
    """Run the stub on ``127.0.0.1:<free port>`` in a thread for the ``with`` block."""
    world = world or StubWorld()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(world, live=live, tick_steps=tick_steps),
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("stub server did not start")
        time.sleep(0.02)
    try:
        yield RunningStub(url=f"http://127.0.0.1:{port}", world=world)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def main() -> None:
    """``python -m tests.ui.stub_server``: serve a live stub until interrupted (benchmarks)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--all-running", action="store_true")
    args = parser.parse_args()
    world = StubWorld(programs=args.programs, all_running=args.all_running, big_nodes=60)
    with serve_stub(world, live=True, tick_steps=args.steps) as stub:
        print(f"stub serving on {stub.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
