"""The gateway with the real program service behind its port: a committed result replayed
for a tool node that a restart rebuilt as running (its execution died with the process)
ends that node, so the program can go idle and stops counting as busy."""

from __future__ import annotations

from pathlib import Path

from agentconsole.scheduler.program import ToolSpec
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from agentconsole.server.gateway.outcome import encode_result
from agentconsole.server.gateway.runner import call_hash
from agentconsole.server.store import make_tool_call_id
from agentconsole.server.store.jsonutil import JSONValue
from tests.server.api.harness import LiveServer, make_config
from tests.server.gateway.helpers import tool_body

ECHO = {"type": "builtin", "name": "echo"}
ARGS: dict[str, JSONValue] = {"text": "hi"}


def test_a_replay_ends_a_tool_node_rebuilt_running_after_a_crash(tmp_path: Path) -> None:
    extension = GatewayExtension(GatewayConfig())
    with LiveServer(make_config(tmp_path / "s.duckdb"), extensions=[extension]) as live:
        live.wait_ready()
        with live.client() as c:
            assert c.post("/v1/tools", json=tool_body("echo", ECHO)).status_code == 201
        # what a crash after the result's commit leaves: the result is stored, and the node
        # came back running, as an orphan, with nothing left to end it
        service = live.live.service
        live.run(service.tools.ensure_tool_node("tenant-a", "orph", "n1", ToolSpec("echo")))
        live.run(service.tools.tool_started("orph", "n1"))
        service.orphaned_tools.add(("orph", "n1"))
        assert extension.gateway is not None
        (tool,) = extension.gateway.tools("tenant-a", operator=False)
        key = make_tool_call_id("orph", "n1", 1)
        intents = live.live.store.intents
        claim = intents.claim(
            key, call_hash(tool, ARGS), "orph", "n1", "echo", side_effect=False, idempotent=True
        ).result(10)
        intents.commit(key, encode_result({"arguments": ARGS}, 0.1), claim.epoch).result(10)
        with live.client() as c:
            body = {"program_id": "orph", "node_id": "n1", "arguments": ARGS}
            retry = c.post("/v1/tools/echo/call", json=body)
            node = c.get("/v1/programs/orph/nodes/n1").json()
    assert retry.status_code == 200, retry.text
    assert retry.json()["status"] == "replayed"
    assert node["state"] == "done"
    assert ("orph", "n1") not in service.orphaned_tools


def test_an_adopted_tool_node_takes_the_registered_spec(tmp_path: Path) -> None:
    """The model asked for ``send_mail`` (a node named only by the ask), then the gateway runs
    the registered tool for it: the node is that tool, a side effect, so a cancel reports it
    as flagged (let run to its end), not as interrupted."""
    with LiveServer(make_config(tmp_path / "s.duckdb")) as live:
        live.wait_ready()
        service = live.live.service
        with live.client() as c:
            assert c.post("/v1/programs", json={"program_id": "mail"}).status_code == 201
            node = {"node_id": "llm-1", "kind": "llm"}
            assert c.post("/v1/programs/mail/nodes", json=node).status_code == 201
        service.tool_calls.asked("mail", "llm-1", "mail/llm-1/0001", ["send_mail"])
        spec = ToolSpec("send_mail", side_effect=True, idempotent=False)
        live.run(service.tools.ensure_tool_node("tenant-a", "mail", "n-mail", spec))
        live.run(service.tools.tool_started("mail", "n-mail"))
        with live.client() as c:
            cancelled = c.post("/v1/programs/mail/cancel").json()
    assert len(cancelled["flagged_tools"]) == 1
    assert cancelled["interrupted_tools"] == []
