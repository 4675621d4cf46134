"""The HTTP server's own limits over raw sockets (``server/api/connections.py``): idle, slow
and oversized requests are closed, the server's own refusals are JSON, and idle connections
hold none of the request slots (``test_api_request_slots.py`` tests the slots)."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentconsole.serve import http_limits
from agentconsole.server.api.connections import HttpLimits, uvicorn_options
from agentconsole.settings import load_settings
from tests.server.api.harness import LiveServer, make_config

LIMITS = HttpLimits(
    timeout_keep_alive=1,
    timeout_headers_s=0.6,
    timeout_body_s=0.6,
    limit_concurrency=8,
    max_header_bytes=4096,
)
HEALTH = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
KEYED = b"GET /v1/overview HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sk-a\r\n\r\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("connections")) / "connections.duckdb"
    with LiveServer(make_config(db), limits=LIMITS) as live:
        live.wait_ready()
        yield live


def address(server: LiveServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


@contextlib.contextmanager
def connection(server: LiveServer) -> Iterator[socket.socket]:
    sock = socket.create_connection(address(server), timeout=5)
    try:
        yield sock
    finally:
        sock.close()


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (or 5 s pass)."""
    chunks = []
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def json_error(raw: bytes, status: int) -> dict[str, Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), raw[:200]
    assert b"content-type: application/json" in head.lower()
    error: dict[str, Any] = json.loads(body)["error"]
    return error


def test_an_idle_connection_is_closed(server: LiveServer) -> None:
    with connection(server) as sock:
        start = time.monotonic()
        assert read_all(sock) == b""
        assert time.monotonic() - start < 3


def test_a_hundred_idle_connections_are_all_closed(server: LiveServer) -> None:
    socks = [socket.create_connection(address(server), timeout=5) for _ in range(100)]
    try:
        start = time.monotonic()
        assert all(read_all(sock) == b"" for sock in socks)
        assert time.monotonic() - start < 4
    finally:
        for sock in socks:
            sock.close()


def test_a_kept_alive_connection_is_closed_after_the_keep_alive(server: LiveServer) -> None:
    with connection(server) as sock:
        sock.sendall(HEALTH)
        start = time.monotonic()
        raw = read_all(sock)
    assert raw.startswith(b"HTTP/1.1 200")
    assert 0.5 < time.monotonic() - start < 4


def test_headers_sent_slowly_are_refused_with_408(server: LiveServer) -> None:
    with connection(server) as sock:
        start = time.monotonic()
        with contextlib.suppress(OSError):  # the server may close while we still write
            for byte in HEALTH[:-4]:
                sock.sendall(bytes([byte]))
                time.sleep(0.05)
        error = json_error(read_all(sock), 408)
    assert error["type"] == "request_timeout"
    assert time.monotonic() - start < 3


def test_a_body_sent_slowly_is_refused_with_408(server: LiveServer) -> None:
    head = (
        b"POST /v1/programs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer sk-a\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    with connection(server) as sock:
        sock.sendall(head)
        error = json_error(read_all(sock), 408)
    assert error["type"] == "request_timeout"


def test_a_head_over_the_limit_is_431(server: LiveServer) -> None:
    big = b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"X-Pad: " + b"a" * 5000 + b"\r\n\r\n"
    with connection(server) as sock:
        sock.sendall(big)
        error = json_error(read_all(sock), 431)
    assert error["type"] == "headers_too_large"


@pytest.mark.parametrize(
    "request_line", [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"]
)
def test_malformed_http_is_a_json_400(server: LiveServer, request_line: bytes) -> None:
    with connection(server) as sock:
        sock.sendall(request_line)
        error = json_error(read_all(sock), 400)
    assert error["type"] == "invalid_http"


def test_idle_connections_past_the_limit_hold_no_slot_and_are_closed(server: LiveServer) -> None:
    """Only requests hold the server's slots (``requestslots.py``): connections that send
    nothing, twice as many as the slots, leave a tenant's request served, and the head timeout
    closes them."""
    assert LIMITS.limit_concurrency is not None
    idle = [
        socket.create_connection(address(server), timeout=5)
        for _ in range(2 * LIMITS.limit_concurrency)
    ]
    try:
        time.sleep(0.1)
        with connection(server) as sock:
            sock.sendall(KEYED)
            assert read_all(sock).startswith(b"HTTP/1.1 200")
        for sock in idle:
            assert read_all(sock) == b""
    finally:
        for sock in idle:
            sock.close()


def test_serve_takes_the_limits_from_the_server_settings(tmp_path: Path) -> None:
    overrides = {
        "server": {
            "timeout_headers_s": 3.5,
            "limit_concurrency": 50,
            "unauthenticated_concurrency": 4,
            "public_concurrency": 8,
        }
    }
    limits = http_limits(load_settings(None, overrides))
    assert limits.timeout_headers_s == 3.5
    assert limits.limit_concurrency == 50
    assert limits.tenant_share == 25  # half, by default
    assert (limits.unauthenticated_concurrency, limits.public_concurrency) == (4, 8)
    shared = {"server": {"limit_concurrency": 50, "per_tenant_concurrency": 10}}
    assert http_limits(load_settings(None, shared)).tenant_share == 10
    options = uvicorn_options(limits)
    # uvicorn's own limit counted connections before any key: the protocol's slots replace it
    assert "limit_concurrency" not in options
    assert options["http"].limits is limits
    assert options["timeout_keep_alive"] == 5
