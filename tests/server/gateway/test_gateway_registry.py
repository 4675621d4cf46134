"""Registering tools: what is refused, who sees what, persistence across a restart, and a
stored tool the current rules refuse (not served, still deletable by its owner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.errors import InvalidJson, InvalidTool, ToolNotFound
from agentconsole.server.store import Store
from agentconsole.server.store.sqlconn import SqlConnection
from tests.server.gateway.helpers import obj, raw, register, tool_body

pytestmark = pytest.mark.anyio
ECHO = {"type": "builtin", "name": "echo"}


async def test_a_registration_survives_a_restart_and_keeps_its_validator(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with Store.open(db) as store:
        gateway = ToolGateway(store)
        await gateway.start()
        first = await register(gateway, tool_body("echo", ECHO, rate_limit_per_s=2.5, burst=4))
        again = await register(gateway, tool_body("echo", ECHO, description="v2"))
        assert again.created_at == first.created_at
        await gateway.close()
    with Store.open(db) as store:
        gateway = ToolGateway(store)
        assert await gateway.start() == 1
        [tool] = gateway.tools("t1", operator=False)
        assert tool.description == "v2"
        assert tool.rate_limit_per_s is None
        compiled = gateway.registry.resolve("t1", "echo")
        assert compiled is not None
        assert not compiled.validator.is_valid({"text": "x", "other": 1})
        await gateway.close()


async def test_visibility_tenant_tools_shadow_platform_ones(gateway: ToolGateway) -> None:
    await register(gateway, tool_body("shared", ECHO, allowed_tenants=["t1"]), operator=True)
    await register(gateway, tool_body("own", ECHO), tenant="t2")
    await register(gateway, tool_body("shared", ECHO, description="t2's"), tenant="t2")
    assert [t.name for t in gateway.tools("t1", operator=False)] == ["shared"]
    assert [(t.name, t.tenant) for t in gateway.tools("t2", operator=False)] == [
        ("own", "t2"),
        ("shared", "t2"),
    ]
    assert len(gateway.tools("anyone", operator=True)) == 3
    assert gateway.registry.resolve("t3", "own") is None
    await register(gateway, tool_body("own", ECHO, description="platform"), operator=True)
    assert [t.tenant for t in gateway.tools("t2", operator=False)] == ["t2", "t2"]
    assert [t.tenant for t in gateway.tools("t1", operator=False)] == ["", ""]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (tool_body("bad name!", ECHO), "name"),
        (tool_body("x", ECHO, timeout_s=0), "timeout_s"),
        (tool_body("x", ECHO, timeout_s=10_000), "timeout_s"),
        (tool_body("x", ECHO, side_effect="yes"), "side_effect"),
        (tool_body("x", ECHO, rate_limit_per_s=-1), "rate_limit_per_s"),
        (tool_body("x", ECHO, burst=0), "burst"),
        (tool_body("x", ECHO, allowed_tenants=["t2"]), "allowed_tenants"),
        (tool_body("x", ECHO, description="a\u202eb"), "description"),
        (tool_body("x", ECHO, surprise=1), "surprise"),
        (tool_body("x", {"type": "builtin", "name": "ledger"}), "executor/name"),
        (tool_body("x", {"type": "builtin", "name": "rm"}), "executor/name"),
        (tool_body("x", {"type": "http", "url": "http://169.254.169.254/"}), "executor/url"),
        (tool_body("x", {"type": "http", "url": "file:///etc/passwd"}), "executor/url"),
        (tool_body("x", {"type": "shell"}), "executor/type"),
        (tool_body("x", {"type": "agent", "cmd": "x"}), "executor"),
        (tool_body("x", ECHO, parameters=obj(a={"type": "object"})), "parameters/properties/a"),
    ],
)
async def test_a_tenant_registration_is_refused_with_the_field(
    store: Store, body: dict[str, object], field: str
) -> None:
    gateway = ToolGateway(store, GatewayConfig())  # default: tenants get echo and sleep only
    await gateway.start()
    with pytest.raises(InvalidTool) as info:
        await register(gateway, body)
    assert info.value.field == field
    assert gateway.tools("t1", operator=False) == []
    await gateway.close()


async def test_operators_may_use_private_executor_urls(gateway: ToolGateway) -> None:
    body = tool_body("internal", {"type": "http", "url": "http://127.0.0.1:9/x"})
    tool = await register(gateway, body, operator=True)
    assert tool.tenant == ""
    assert tool.executor.url == "http://127.0.0.1:9/x"


async def test_a_body_that_is_not_json_is_refused(gateway: ToolGateway) -> None:
    with pytest.raises(InvalidJson):
        await gateway.register("t1", False, b"{nope")
    with pytest.raises(InvalidJson):
        await gateway.register("t1", False, raw({"a": 1}) + b'{"b": 2}')


#: a schema today's rules refuse (an object open to any property), as an older server stored it
OPEN_SCHEMA = json.dumps({"type": "object"})


def _store_refused_schema(con: SqlConnection) -> None:
    con.execute("UPDATE tools SET json_schema = ? WHERE name = 'old'", [OPEN_SCHEMA])


def _stored(store: Store) -> list[tuple[str, str]]:
    with store.cursor() as cur:
        return [(r[0], r[1]) for r in cur.execute("SELECT tenant, name FROM tools").fetchall()]


async def test_a_stored_tool_the_rules_refuse_is_not_served_but_its_owner_deletes_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.duckdb"
    with Store.open(db) as store:
        gateway = ToolGateway(store)
        await gateway.start()
        await register(gateway, tool_body("old", ECHO))
        await register(gateway, tool_body("kept", ECHO))
        store.writer.call(_store_refused_schema).result(10)
        await gateway.close()
    with Store.open(db) as store:
        gateway = ToolGateway(store)
        assert await gateway.start() == 1  # skipped at load: not served
        assert [t.name for t in gateway.tools("t1", operator=False)] == ["kept"]
        assert gateway.registry.resolve("t1", "old") is None
        with pytest.raises(ToolNotFound):  # another tenant: as for a name nobody registered
            await gateway.delete("t2", False, "old")
        with pytest.raises(ToolNotFound):  # nor is it the platform's
            await gateway.delete("t2", True, "old")
        deleted = await gateway.delete("t1", False, "old")
        assert (deleted.tenant, deleted.name) == ("t1", "old")
        assert _stored(store) == [("t1", "kept")]  # durable before the answer
        with pytest.raises(ToolNotFound):  # deleted already
            await gateway.delete("t1", False, "old")
        await gateway.close()
    with Store.open(db) as store:
        gateway = ToolGateway(store)
        assert await gateway.start() == 1
        assert _stored(store) == [("t1", "kept")]  # a restart does not bring it back
        await gateway.close()


async def test_registering_the_name_again_replaces_a_refused_stored_tool(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with Store.open(db) as store:
        gateway = ToolGateway(store)
        await gateway.start()
        await register(gateway, tool_body("old", ECHO))
        store.writer.call(_store_refused_schema).result(10)
        await gateway.close()
    with Store.open(db) as store:
        gateway = ToolGateway(store)
        assert await gateway.start() == 0
        again = await register(gateway, tool_body("old", ECHO, description="v2"))
        assert gateway.registry.resolve("t1", "old") is not None
        assert (await gateway.delete("t1", False, "old")) == again
        assert _stored(store) == []
        with pytest.raises(ToolNotFound):  # the row it replaced is not deleted a second time
            await gateway.delete("t1", False, "old")
        await gateway.close()
