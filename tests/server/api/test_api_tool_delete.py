"""``DELETE /v1/tools/{name}`` over real HTTP: a tenant deletes its own tools only (another
tenant's tool answers as a name nobody registered, 404), the delete is durable in the DuckDB
file (a restart on the same file does not bring the tool back), it gives the tool's share of
the tenant's bounds and stored bytes back, a call of the tool already running finishes, and
every later call of the name, a retry of a committed one included, is answered 404 as an
unknown tool's; a stored tool the schema rules now refuse is still its owner's to delete."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.client import AgentConsole, NotFoundError, PermissionDeniedError
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from agentconsole.server.gateway.toolbounds import ToolBounds
from agentconsole.server.store.sqlconn import SqlConnection
from tests.server.api.harness import OPERATOR, LiveServer, make_config, wait_until
from tests.server.api.toolregistry import ECHO, bounded_server, echo_tool, stored_bytes
from tests.server.gateway.helpers import obj, tool_body

SLEEP = {"type": "builtin", "name": "sleep"}


def _names(c: httpx.Client) -> list[str]:
    answer = c.get("/v1/tools")
    assert answer.status_code == 200, answer.text
    return [t["name"] for t in answer.json()["tools"]]


def _call(c: httpx.Client, name: str, program: str, node: str, **args: Any) -> httpx.Response:
    body = {"program_id": program, "node_id": node, "arguments": args}
    return c.post(f"/v1/tools/{name}/call", json=body)


def _unknown(answer: httpx.Response) -> None:
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["type"] == "tool_not_found"


def test_a_tenant_deletes_its_own_tools_only(tmp_path: Path) -> None:
    live, _ = bounded_server(make_config(tmp_path / "own.duckdb"))
    with (
        live,
        live.client("sk-a") as a,
        live.client("sk-b") as b,
        live.client(OPERATOR) as op,
    ):
        live.wait_ready()
        assert a.post("/v1/tools", json=echo_tool("shared")).status_code == 201
        assert b.post("/v1/tools", json=echo_tool("shared")).status_code == 201
        assert b.post("/v1/tools", json=echo_tool("b-only")).status_code == 201
        assert op.post("/v1/tools", json=echo_tool("platform")).status_code == 201
        # another tenant's tool answers as a name nobody registered: it is not told it exists
        nobody, theirs = a.delete("/v1/tools/nobody"), a.delete("/v1/tools/b-only")
        _unknown(nobody)
        _unknown(theirs)
        assert theirs.json()["error"]["message"] == nobody.json()["error"]["message"].replace(
            "nobody", "b-only"
        )
        _unknown(a.delete("/v1/tools/not%20a%20name"))
        # a platform tool it sees is not its to delete
        refused = a.delete("/v1/tools/platform")
        assert refused.status_code == 403, refused.text
        deleted = a.delete("/v1/tools/shared")
        assert deleted.status_code == 200, deleted.text
        assert (deleted.json()["name"], deleted.json()["owner"]) == ("shared", "tenant-a")
        assert _names(a) == ["platform"]
        assert _names(b) == ["b-only", "platform", "shared"]  # b's own tool of that name stays
        _unknown(_call(a, "shared", "p-a", "n1", text="hi"))
        assert _call(b, "shared", "p-b", "n1", text="hi").status_code == 200
        _unknown(a.delete("/v1/tools/shared"))  # deleted already
        # an operator key deletes the platform's tool
        assert op.delete("/v1/tools/platform").status_code == 200
        assert _names(a) == []
        audit = op.get("/v1/operator/audit", params={"limit": 1000}).json()["actions"]
    deletes = [(r["target"], r["result"]) for r in audit if r["action"] == "tool.delete"]
    assert ("tool:shared", "ok") in deletes
    assert ("tool:platform", "ok") in deletes
    assert sum(result != "ok" for _, result in deletes) == 5  # refusals are audited too


def test_a_delete_gives_the_tool_s_share_back(tmp_path: Path) -> None:
    live, _ = bounded_server(make_config(tmp_path / "share.duckdb"), ToolBounds(tools=2))
    with live, live.client("sk-a") as a:
        live.wait_ready()
        assert a.post("/v1/tools", json=echo_tool("t1", "x" * 3_000)).status_code == 201
        assert a.post("/v1/tools", json=echo_tool("t2")).status_code == 201
        both = stored_bytes(live)
        full = a.post("/v1/tools", json=echo_tool("t3"))
        assert full.status_code == 429, full.text
        assert full.json()["error"]["field"] == "limits.tools"
        assert a.delete("/v1/tools/t1").status_code == 200
        assert stored_bytes(live) < both - 3_000  # its stored bytes are refunded
        assert a.post("/v1/tools", json=echo_tool("t3")).status_code == 201


def test_a_deleted_tool_stays_deleted_after_a_restart(tmp_path: Path) -> None:
    config = make_config(tmp_path / "restart.duckdb")
    live, _ = bounded_server(config)
    with live, live.client("sk-a") as a:
        live.wait_ready()
        for name in ("gone", "kept"):
            assert a.post("/v1/tools", json=echo_tool(name, "x" * 2_000)).status_code == 201
        done = _call(a, "gone", "p1", "n1", text="once")
        assert done.status_code == 200, done.text
        assert a.delete("/v1/tools/gone").status_code == 200
        kept_bytes = stored_bytes(live)
    live, _ = bounded_server(config)
    with live, live.client("sk-a") as a:
        live.wait_ready()
        assert _names(a) == ["kept"]
        assert stored_bytes(live) == kept_bytes  # the deleted tool's row is not counted again
        # a program that asks for it later, even to retry a committed call, finds no tool
        _unknown(_call(a, "gone", "p1", "n1", text="once"))
        _unknown(_call(a, "gone", "p1", "n2", text="new"))
        # registered again, the name is a tool again: the committed call replays
        assert a.post("/v1/tools", json=echo_tool("gone")).status_code == 201
        again = _call(a, "gone", "p1", "n1", text="once")
        assert again.status_code == 200, again.text
        assert again.json()["status"] == "replayed"


def _refuse_stored_schema(con: SqlConnection) -> None:
    """What an older server may have stored: a schema today's rules refuse (an open object)."""
    schema = json.dumps({"type": "object"})
    con.execute("UPDATE tools SET json_schema = ? WHERE name = 'legacy'", [schema])


def _stored_names(live: LiveServer) -> list[str]:
    with live.live.store.cursor() as cur:
        return [row[0] for row in cur.execute("SELECT name FROM tools ORDER BY name").fetchall()]


def test_a_stored_tool_the_rules_now_refuse_is_deleted_by_its_owner(tmp_path: Path) -> None:
    """Skipped at start-up (not served nor listed), the tool is still its owner's to delete
    (another tenant gets the unknown tool's 404), and the delete is durable."""
    config = make_config(tmp_path / "legacy.duckdb")
    live, _ = bounded_server(config)
    with live, live.client("sk-a") as a:
        live.wait_ready()
        for name in ("legacy", "kept"):
            assert a.post("/v1/tools", json=echo_tool(name)).status_code == 201
        live.live.store.writer.call(_refuse_stored_schema).result(10)
    live, _ = bounded_server(config)
    with live, live.client("sk-a") as a, live.client("sk-b") as b:
        live.wait_ready()
        assert _names(a) == ["kept"]
        _unknown(_call(a, "legacy", "p1", "n1", text="hi"))
        _unknown(b.delete("/v1/tools/legacy"))
        deleted = a.delete("/v1/tools/legacy")
        assert deleted.status_code == 200, deleted.text
        assert (deleted.json()["name"], deleted.json()["owner"]) == ("legacy", "tenant-a")
        _unknown(a.delete("/v1/tools/legacy"))
    live, _ = bounded_server(config)
    with live:
        live.wait_ready()
        assert _stored_names(live) == ["kept"]  # a restart does not bring it back


def test_a_call_running_when_its_tool_is_deleted_finishes(tmp_path: Path) -> None:
    extension = GatewayExtension(GatewayConfig(tenant_builtins=None))
    live = LiveServer(make_config(tmp_path / "flight.duckdb"), extensions=[extension])
    body = tool_body("slow", SLEEP, parameters=obj(seconds={"type": "number", "maximum": 10}))
    answers: list[httpx.Response] = []
    with live, live.client("sk-a") as a:
        live.wait_ready()
        assert a.post("/v1/tools", json=body).status_code == 201

        def call() -> None:
            with live.client("sk-a") as c:
                answers.append(_call(c, "slow", "p1", "n1", seconds=1.0))

        caller = threading.Thread(target=call)
        caller.start()
        wait_until(lambda: _running(extension) == 1)
        assert a.delete("/v1/tools/slow").status_code == 200
        _unknown(_call(a, "slow", "p1", "n2", seconds=0))  # a new call: no such tool
        assert _running(extension) == 1  # the running call is left to finish
        caller.join(10)
    assert len(answers) == 1
    assert answers[0].status_code == 200, answers[0].text
    assert answers[0].json()["status"] == "committed"


def _running(extension: GatewayExtension) -> int:
    """Gateway tool executions in flight."""
    gateway = extension.gateway
    return 0 if gateway is None else len(gateway.running())


def test_the_sdk_deletes_a_tool(tmp_path: Path) -> None:
    live, _ = bounded_server(make_config(tmp_path / "sdk.duckdb"))
    with live, AgentConsole(live.url, "sk-a") as console, AgentConsole(live.url, OPERATOR) as op:
        live.wait_ready()
        console.register_tool("mine", obj(), ECHO)
        op.register_tool("theirs", obj(), ECHO)
        deleted = console.delete_tool("mine")
        assert (deleted.name, deleted.owner) == ("mine", "tenant-a")
        assert [t.name for t in console.list_tools()] == ["theirs"]
        with pytest.raises(NotFoundError):
            console.delete_tool("mine")  # deleted already
        with pytest.raises(PermissionDeniedError):
            console.delete_tool("theirs")  # a platform tool
