"""The server's request slots shared per tenant, over real HTTP (``server/api/requestslots.py``):
a tenant past its share is refused 429 while the others are served, requests without a valid
key (idle, trickling a body, an unknown key) cannot take the tenants' slots, and the public
routes keep answering while the tenants' slots are full."""

from __future__ import annotations

import contextlib
import inspect
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute
from uvicorn._types import HTTPScope

from agentconsole.serve import ConsoleExtension
from agentconsole.server.api.auth import KeyRing
from agentconsole.server.api.connections import HttpLimits
from agentconsole.server.api.requestslots import Pool, Refusal, RequestSlots, public_pool
from agentconsole.server.app import create_app
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from tests.server.api.harness import (
    OPERATOR,
    TENANT_KEYS,
    LiveServer,
    chat_body,
    make_config,
    wait_until,
)

#: a small server: 6 keyed slots (3 a tenant: the default half), 2 for callers without a key
LIMITS = HttpLimits(
    timeout_headers_s=2.0,
    timeout_body_s=5.0,
    limit_concurrency=6,
    unauthenticated_concurrency=2,
    public_concurrency=4,
)
SHARE = 3
#: a request head that promises a body it will trickle (the body timeout is the only bound)
TRICKLE = (
    "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n{auth}"
    "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("slots")) / "slots.duckdb"
    with LiveServer(make_config(db), limits=LIMITS) as live:
        live.wait_ready()
        yield live


@contextlib.contextmanager
def feeds(server: LiveServer, key: str, count: int) -> Iterator[None]:
    """``count`` open ``/v1/events`` feeds of ``key``'s, each holding a request slot."""
    with contextlib.ExitStack() as stack:
        for _ in range(count):
            client = stack.enter_context(server.client(key))
            response = stack.enter_context(client.stream("GET", "/v1/events"))
            assert response.status_code == 200, response.read()
        yield


def refusal(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == kind
    return error


def address(server: LiveServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def test_a_tenant_past_its_share_gets_429_while_another_is_served(server: LiveServer) -> None:
    assert LIMITS.tenant_share == SHARE
    with server.client("sk-a") as a, server.client("sk-b") as b:
        with feeds(server, "sk-a", SHARE):
            over = a.get("/v1/overview")
            error = refusal(over, 429, "tenant_limit")
            assert error["field"] == "server.per_tenant_concurrency"
            assert over.headers["retry-after"] == "1"
            assert over.headers["x-should-retry"] == "true"
            # the other tenant is served, and its whole share is there: the refused request
            # took no slot
            assert b.post("/v1/chat/completions", json=chat_body()).status_code == 200
            with feeds(server, "sk-b", SHARE):
                # every keyed slot is held: a third caller meets a full server (503), not a
                # tenant limit, and the public routes still answer
                with server.client(OPERATOR) as op:
                    full = op.get("/v1/overview")
                refusal(full, 503, "unavailable")
                assert full.headers["retry-after"] == "1"
                with server.client(None) as anonymous:
                    assert anonymous.get("/health").status_code == 200
                    assert anonymous.get("/metrics").status_code == 200
        # the feeds ended: their slots came back
        wait_until(lambda: a.get("/v1/overview").status_code == 200, 5)


def test_callers_without_a_valid_key_cannot_starve_a_tenant(server: LiveServer) -> None:
    """Repro B, small: connections with no key or an unknown one that promise a big body
    and trickle it, and idle ones, far more than the server's slots; a tenant is still
    served, and past their small pool they are answered 401 at once, their body unread."""
    heads = [TRICKLE.format(auth="") for _ in range(12)]
    heads += [TRICKLE.format(auth="Authorization: Bearer sk-nobody\r\n") for _ in range(12)]
    socks: list[socket.socket] = []
    try:
        socks += [socket.create_connection(address(server), timeout=5) for _ in range(12)]
        trickling = [socket.create_connection(address(server), timeout=5) for _ in heads]
        socks += trickling
        for sock, head in zip(trickling, heads, strict=True):
            sock.sendall(head.encode())
        with server.client("sk-b") as b:
            answer = b.post("/v1/chat/completions", json=chat_body())
            assert answer.status_code == 200, answer.text
            assert b.get("/v1/overview").status_code == 200
        with server.client(None) as anonymous:
            assert anonymous.get("/health").status_code == 200
        start = time.monotonic()
        answers = [_answer(sock, 1.0) for sock in trickling]
        refused = [raw for raw in answers if raw.startswith(b"HTTP/1.1 401 ")]
        # all but the pool's two (the app reads their body, then answers 401 as ever)
        assert len(refused) >= len(heads) - LIMITS.unauthenticated_concurrency
        assert all(b"www-authenticate: bearer" in raw.lower() for raw in refused)
        assert all(b'"type": "unauthorized"' in raw for raw in refused)
        assert time.monotonic() - start < LIMITS.timeout_body_s  # never waited for a body
    finally:
        for sock in socks:
            sock.close()


def _answer(sock: socket.socket, timeout: float) -> bytes:
    """What the server sent on ``sock`` within ``timeout`` (until it closed)."""
    sock.settimeout(timeout)
    chunks = []
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _scope(path: str, key: str | None = None, method: str = "GET") -> HTTPScope:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    return cast(HTTPScope, {"type": "http", "method": method, "path": path, "headers": headers})


def test_each_pool_is_bounded_apart_and_gives_its_slots_back() -> None:
    slots = RequestSlots(
        KeyRing(TENANT_KEYS, [OPERATOR]), keyed=4, per_tenant=2, unauthenticated=1, public=1
    )
    probe = slots.admit(_scope("/health"))
    assert callable(probe)
    assert not isinstance(probe, Refusal)
    assert isinstance(slots.admit(_scope("/ready", "sk-a")), Refusal)  # the probes' pool
    assert not isinstance(slots.admit(_scope("/static/app.js")), Refusal)  # the files' own
    assert isinstance(slots.admit(_scope("/v1/overview", method="OPTIONS")), Refusal)  # files
    keyless = slots.admit(_scope("/v1/overview"))
    assert not isinstance(keyless, Refusal)
    unknown = slots.admit(_scope("/v1/overview", "sk-nobody"))
    assert isinstance(unknown, Refusal)
    assert unknown.status == 401
    assert [dict(unknown.headers)[b"www-authenticate"]] == [b"Bearer"]
    held = [slots.admit(_scope("/v1/overview", key)) for key in ("sk-a", "sk-a", OPERATOR)]
    assert not any(isinstance(release, Refusal) for release in held)
    over = slots.admit(_scope("/v1/programs", "sk-a"))
    assert isinstance(over, Refusal)
    assert over.status == 429
    assert slots.by_tenant == {"tenant-a": 2, "operator": 1}
    for release in (probe, keyless, *held):
        assert not isinstance(release, Refusal)
        release()
    assert slots.keyed == 0
    assert not slots.by_tenant
    assert slots.pools[Pool.PROBES] == slots.pools[Pool.UNAUTHENTICATED] == 0


def _needs_key(handler: HTTPRouteHandler) -> bool:
    """Whether ``handler`` resolves the caller's key (directly or through its providers)."""
    providers = handler.resolve_dependencies()
    todo, seen = list(handler.parsed_fn_signature.parameters), set[str]()
    while todo:
        name = todo.pop()
        if name in ("principal", "operator_principal"):
            return True
        if name in providers and name not in seen:
            seen.add(name)
            todo += inspect.signature(providers[name].dependency).parameters
    return False


def test_the_public_pools_hold_exactly_the_routes_needing_no_key(tmp_path: Path) -> None:
    """A route that needs no key counts in a public pool, every other in its tenant's share
    (or, without a valid key, the small pool whose overflow is answered 401): a public route
    added without its path here would be refused with the callers without a key."""
    gateway = GatewayExtension(GatewayConfig())
    app = create_app(
        make_config(tmp_path / "routes.duckdb"), extensions=[gateway, ConsoleExtension()]
    )
    checked = 0
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            for method in handler.http_methods:
                path = route.path_format or "/"
                assert (public_pool(method, path) is None) == _needs_key(handler), (method, path)
                checked += 1
    assert checked > 40
