"""The published contract declares the tenant's request-slot share's 429 on every keyed route
(``requestslots.py``: every request with a valid key takes one of its tenant's slots), the
generation routes included, and on no public route (their pools answer 503); and a keyed route
other than ``/v1/events`` does answer it, over real HTTP."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from agentconsole.server.api.connections import HttpLimits
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from tests.server.api.harness import LiveServer, make_config

SHARE = "server.per_tenant_concurrency"


def _responses(schema: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    responses: dict[str, Any] = schema["paths"][path][method]["responses"]
    return responses


def test_every_keyed_route_declares_the_tenant_share_s_429(tmp_path: Path) -> None:
    extension = GatewayExtension(GatewayConfig(tenant_builtins=None))
    live = LiveServer(make_config(tmp_path / "contract.duckdb"), extensions=[extension])
    with live, live.client(None) as c:
        answer = c.get("/schema/openapi.json")
    assert answer.status_code == 200, answer.text
    schema = answer.json()
    chat = _responses(schema, "/v1/chat/completions", "post")
    assert "429" in chat
    assert SHARE in chat["429"]["description"]
    assert "Retry-After" in chat["429"]["headers"]
    for path, method in (
        ("/v1/completions", "post"),
        ("/v1/programs/{program_id}", "get"),
        ("/v1/tools", "get"),
        ("/v1/tools/{name}", "delete"),
        ("/v1/operator/audit", "get"),
    ):
        assert "429" in _responses(schema, path, method), (path, method)
    for path in ("/health", "/ready"):
        assert "429" not in _responses(schema, path, "get"), path


def test_a_tenant_past_its_share_gets_429_on_any_keyed_route(tmp_path: Path) -> None:
    limits = HttpLimits(per_tenant_concurrency=1)
    with LiveServer(make_config(tmp_path / "share.duckdb"), limits=limits) as live:
        live.wait_ready()
        with live.client("sk-a") as a, live.client("sk-b") as b:
            with a.stream("GET", "/v1/events") as feed:  # holds tenant-a's one slot
                assert feed.status_code == 200
                refused = a.get("/v1/programs")
                assert refused.status_code == 429, refused.text
                assert refused.json()["error"]["field"] == SHARE
                assert b.get("/v1/programs").status_code == 200  # tenant-b's share is its own
            assert _eventually_ok(a)


def _eventually_ok(c: httpx.Client) -> bool:
    """The slot comes back once the feed's answer has ended."""
    for _ in range(100):
        if c.get("/v1/programs").status_code == 200:
            return True
        time.sleep(0.05)
    return False
