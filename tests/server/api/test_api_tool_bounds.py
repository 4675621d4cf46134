"""The tool registry against one tenant filling it, over real HTTP: a tenant registers at most
so many tools and so many bytes of them (a replacement counts once), its tool definitions
count in its stored bytes (after a restart too), and ``GET /v1/tools`` is paged as
``GET /v1/programs`` is, so no listing answers the whole registry at once.

The bounds are lowered here through the gateway's config (``limits.tools`` and
``limits.tool_bytes`` in ``serve``: ``tests/app/test_serve_tenant_settings.py``), or on the
running registry (the server runs in this process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentconsole.server.gateway import GatewayExtension
from agentconsole.server.gateway import registry as registry_module
from agentconsole.server.gateway.toolbounds import ToolBounds
from agentconsole.server.live.tenants import TenantLimits
from tests.server.api.harness import OPERATOR, LiveServer, gateway_server, make_config
from tests.server.api.toolregistry import bounded_server, echo_tool, stored_bytes


def _refusal(answer: httpx.Response, field: str) -> None:
    assert answer.status_code == 429, answer.text
    error = answer.json()["error"]
    assert (error["type"], error["field"]) == ("tenant_limit", field)
    assert answer.headers["x-should-retry"] == "false"  # waiting does not make room


def _names(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [t["name"] for t in answer.json()["tools"]]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with gateway_server(tmp_path / "tools.duckdb") as live:
        yield live


def _bytes_of(extension: GatewayExtension, tenant: str, name: str) -> int:
    """What the registry counts of ``tenant``'s tool ``name``."""
    assert extension.gateway is not None
    compiled = extension.gateway.registry.resolve(tenant, name)
    assert compiled is not None
    return compiled.stored_bytes


def test_a_tenant_registers_at_most_its_bound_of_tools(tmp_path: Path) -> None:
    server, _ = bounded_server(make_config(tmp_path / "count.duckdb"), ToolBounds(tools=3))
    with (
        server,
        server.client("sk-a") as a,
        server.client("sk-b") as b,
        server.client(OPERATOR) as op,
    ):
        server.wait_ready()
        for i in range(3):
            assert a.post("/v1/tools", json=echo_tool(f"t{i}")).status_code == 201
        refused = a.post("/v1/tools", json=echo_tool("t3"))
        _refusal(refused, "limits.tools")
        assert refused.json()["error"]["limit"] == 3
        # replacing a tool it has is no new tool: it passes, and still counts once
        for _ in range(3):
            again = a.post("/v1/tools", json=echo_tool("t1", description="v2"))
            assert again.status_code == 201, again.text
        _refusal(a.post("/v1/tools", json=echo_tool("t4")), "limits.tools")
        assert _names(a.get("/v1/tools")) == ["t0", "t1", "t2"]
        # the bound is the tenant's own: another tenant and the platform still register
        assert b.post("/v1/tools", json=echo_tool("t3")).status_code == 201
        assert op.post("/v1/tools", json=echo_tool("platform")).status_code == 201
        audit = op.get("/v1/operator/audit", params={"limit": 1000}).json()["actions"]
    refusals = [r for r in audit if r["action"] == "tool.register" and r["result"] != "ok"]
    assert len(refusals) == 2  # refused registrations are audited as the others are


def test_a_tenant_s_tools_take_at_most_their_bound_of_bytes(tmp_path: Path) -> None:
    live, extension = bounded_server(make_config(tmp_path / "bytes.duckdb"))
    with live, live.client("sk-a") as a:
        live.wait_ready()
        assert a.post("/v1/tools", json=echo_tool("big0", "x" * 2_000)).status_code == 201
        one_tool = _bytes_of(extension, "tenant-a", "big0")
        assert extension.gateway is not None  # the bound set once one tool's size is known
        registry = extension.gateway.registry
        registry.bounds = ToolBounds(tool_bytes=3 * one_tool + 100)
        for i in (1, 2):
            assert a.post("/v1/tools", json=echo_tool(f"big{i}", "x" * 2_000)).status_code == 201
        _refusal(a.post("/v1/tools", json=echo_tool("big3", "x" * 2_000)), "limits.tool_bytes")
        # a replacement counts its new size in place of the old one's
        assert a.post("/v1/tools", json=echo_tool("big1", "y" * 2_000)).status_code == 201
        assert a.post("/v1/tools", json=echo_tool("big1", "y" * 2_050)).status_code == 201
        _refusal(a.post("/v1/tools", json=echo_tool("big1", "y" * 2_200)), "limits.tool_bytes")
        _refusal(a.post("/v1/tools", json=echo_tool("big3", "x" * 1_500)), "limits.tool_bytes")
        # a tool made smaller makes room for another
        assert a.post("/v1/tools", json=echo_tool("big1", "small")).status_code == 201
        assert a.post("/v1/tools", json=echo_tool("big3", "x" * 1_500)).status_code == 201


def test_tools_are_listed_by_pages(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"tool{i:02d}" for i in range(7)]
    with server.client("sk-a") as a, server.client("sk-b") as b, server.client(OPERATOR) as op:
        for name in names:
            assert a.post("/v1/tools", json=echo_tool(name)).status_code == 201
        assert b.post("/v1/tools", json=echo_tool("tool03")).status_code == 201
        assert op.post("/v1/tools", json=echo_tool("tool03")).status_code == 201  # a's shadows it
        assert op.post("/v1/tools", json=echo_tool("zplatform")).status_code == 201
        everything = a.get("/v1/tools")
        # a small registry answers as before, on one page: its cursor says it is the last
        assert _names(everything) == [*names, "zplatform"]
        assert everything.json()["next_cursor"] is None
        assert _walk(a, limit=3) == [[*names[:3]], [*names[3:6]], [names[6], "zplatform"]]
        assert [t for page in _walk(op, limit=2, owners=True) for t in page] == [
            *(f"{n}/tenant-a" for n in names[:3]),
            "tool03/None",
            "tool03/tenant-a",
            "tool03/tenant-b",
            *(f"{n}/tenant-a" for n in names[4:]),
            "zplatform/None",
        ]
        # a page holds at most so many bytes of tools, however large its limit (one at least)
        monkeypatch.setattr(registry_module, "MAX_PAGE_BYTES", 1)
        assert _walk(b, limit=100) == [["tool03"], ["zplatform"]]
        bad = a.get("/v1/tools", params={"cursor": "bm90LWEtY3Vyc29y"})
        assert bad.status_code == 422
        assert bad.json()["error"]["field"] == "cursor"
        assert a.get("/v1/tools", params={"limit": 0}).status_code == 422


def _walk(c: httpx.Client, *, limit: int, owners: bool = False) -> list[list[str]]:
    """Every page of ``GET /v1/tools`` by ``limit``, following ``next_cursor``: the tools'
    names (with their owner when ``owners``), page by page."""
    pages: list[list[str]] = []
    params: dict[str, str | int] = {"limit": limit}
    while True:
        answer = c.get("/v1/tools", params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert len(body["tools"]) <= limit
        pages.append([f"{t['name']}/{t['owner']}" if owners else t["name"] for t in body["tools"]])
        if body["next_cursor"] is None:
            return pages
        params["cursor"] = body["next_cursor"]


def test_tool_definitions_count_in_the_tenant_s_stored_bytes(tmp_path: Path) -> None:
    db = tmp_path / "stored.duckdb"
    config = make_config(db, tenant_overrides={"tenant-a": TenantLimits(stored_bytes=1)})
    live, extension = bounded_server(config)
    with live, live.client("sk-a") as a:
        live.wait_ready()
        assert stored_bytes(live) == 0
        assert a.post("/v1/tools", json=echo_tool("big", "x" * 3_000)).status_code == 201
        stored = stored_bytes(live)
        assert stored > 3_000  # the tool's row: its description, schema, executor...
        assert stored == _bytes_of(extension, "tenant-a", "big")
        # the storage is full: a tool that would store more is refused as a node would be
        refused = a.post("/v1/tools", json=echo_tool("more"))
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["field"] == "limits.stored_bytes"
        # one that stores no more passes: the same again (counted once), then a smaller one
        assert a.post("/v1/tools", json=echo_tool("big", "x" * 3_000)).status_code == 201
        assert stored_bytes(live) == stored
        assert a.post("/v1/tools", json=echo_tool("big", "short")).status_code == 201
        smaller = stored_bytes(live)
        assert smaller < 1_000
    live, _ = bounded_server(config)
    with live:  # counted from the store after a restart
        live.wait_ready()
        assert stored_bytes(live) == smaller
