"""A node cancel and the gateway's tools, over real HTTP (simulated runtime, DuckDB store, a
loopback ``http`` tool): what the cancel answers is what the gateway did.

A tool call the model asked for and the agent runs through the gateway under the model's call
id is interrupted by its node's cancel (the server's node, ``tool-...``), and once cancelled it
does not run under that id on a node of its own (only a tool the gateway really stopped is
``interrupted``: ``test_api_cancel_tools.py``). A retry of a call that committed on a cancelled
node reads its result back, as on a cancelled program.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from agentconsole.scheduler.events import EventKind
from tests.loopback_executor import LoopbackExecutor
from tests.server.api.background import ARGUMENTS, call_tool_in_background, served_with_runner
from tests.server.api.harness import LiveServer, chat_body, node_view, wait_until
from tests.server.api.test_api_cancel_effects import (
    WRITE_S,
    _downstream,
    _hub_events,
    _register,
)
from tests.server.gateway.helpers import tool_body


def _model_asks(c: httpx.Client, pid: str, tool: str) -> tuple[str, str]:
    """A chat call of ``pid`` whose model answers with a call of ``tool``: (the tool call's
    id, the server's node for it)."""
    function = {"name": tool, "parameters": {"type": "object", "properties": {}}}
    body = chat_body(
        "go",
        tools=[{"type": "function", "function": function}],
        agentconsole={"program_id": pid, "node_id": "ask"},
    )
    answer = c.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    (asked,) = answer.json()["choices"][0]["message"]["tool_calls"]
    call_id: str = asked["id"]
    node = f"tool-{call_id.removeprefix('call_')}"
    assert c.get(f"/v1/programs/{pid}/nodes/{node}").json()["state"] == "running"
    return call_id, node


@contextmanager
def _model_asked(
    db: Path, delay_s: float = WRITE_S
) -> Iterator[tuple[LiveServer, httpx.Client, LoopbackExecutor, str, str, str]]:
    """A ready server, a tenant's client, a loopback read answering after ``delay_s``, the
    read-only tool registered on it, and program ``m`` whose model asked for that tool: its
    call's id and the server's node for it (:func:`_model_asks`)."""
    with _downstream(delay_s) as reads, served_with_runner(db) as (server, c, _):
        tool = _register(c, reads.url, side_effect=False)
        call_id, node = _model_asks(c, "m", tool)
        yield server, c, reads, tool, call_id, node


def test_a_node_cancel_interrupts_the_gateway_run_of_a_tool_call_the_model_asked_for(
    tmp_path: Path,
) -> None:
    with _model_asked(tmp_path / "asked.duckdb") as (server, c, reads, tool, call_id, node):
        thread, answers = call_tool_in_background(server, tool, "m", call_id)
        wait_until(lambda: reads.requests == 1)
        cancelled = c.post(f"/v1/programs/m/nodes/{node}/cancel")
        thread.join(30)
        ended = node_view(c, "m", node)
        program = c.get("/v1/programs/m").json()
        events = [e for e in _hub_events(server) if e.node_id == node]
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["interrupted_tools"] == [node]
    (answer,) = answers
    assert answer.status_code == 409, answer.text  # the gateway stopped it, as it says
    assert "node was cancelled" in answer.json()["error"]["message"]
    assert ended["state"] == "cancelled"
    assert ended["outcome_after_cancel"] is None
    assert not [e for e in events if e.kind is EventKind.TOOL_FINISHED]
    # no second node for the agent's id of the call
    assert call_id not in [n["node_id"] for n in program["nodes"]]


def test_a_tool_call_the_model_asked_for_does_not_run_once_its_node_was_cancelled(
    tmp_path: Path,
) -> None:
    with _model_asked(tmp_path / "gone.duckdb", 0.1) as (server, c, reads, tool, call_id, node):
        cancelled = c.post(f"/v1/programs/m/nodes/{node}/cancel")
        thread, answers = call_tool_in_background(server, tool, "m", call_id)
        thread.join(30)
        program = c.get("/v1/programs/m").json()
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["cancelled_nodes"] == [node]
    (answer,) = answers
    assert answer.status_code == 409, answer.text
    assert "was cancelled" in answer.json()["error"]["message"]
    assert reads.requests == 0  # the tool did not run
    assert sorted(n["node_id"] for n in program["nodes"]) == sorted(["ask", node])


def test_a_retry_of_a_call_that_committed_on_a_cancelled_node_reads_its_result(
    tmp_path: Path,
) -> None:
    with _downstream() as writes, served_with_runner(tmp_path / "retry.duckdb") as (server, c, _):
        tool = _register(c, writes.url, side_effect=True)
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        thread, answers = call_tool_in_background(server, tool, "p", "t1")
        wait_until(lambda: writes.requests == 1)
        cancelled = c.post("/v1/programs/p/nodes/t1/cancel").json()
        call = {"program_id": "p", "node_id": "t1", "arguments": ARGUMENTS}
        while_running = c.post(f"/v1/tools/{tool}/call", json=call)
        thread.join(30)
        retried = c.post(f"/v1/tools/{tool}/call", json=call)
        other = c.post(f"/v1/tools/{tool}/call", json={**call, "attempt": 2})
    assert cancelled["flagged_tools"] == ["t1"]
    assert while_running.status_code == 409, while_running.text
    assert while_running.json()["error"]["type"] == "in_progress"
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert retried.status_code == 200, retried.text
    assert retried.json()["status"] == "replayed"
    assert retried.json()["result"] == answer.json()["result"]
    assert writes.requests == 1  # read back, never run again
    assert other.status_code == 409, other.text  # a new call on the cancelled node
    assert "was cancelled" in other.json()["error"]["message"]


def test_a_retry_of_a_call_left_in_doubt_on_a_cancelled_node_needs_reconcile(
    tmp_path: Path,
) -> None:
    with _downstream() as writes, served_with_runner(tmp_path / "doubt.duckdb") as (server, c, _):
        body = tool_body(
            "doubtful_write",
            {"type": "http", "url": writes.url},
            side_effect=True,
            idempotent=False,
            timeout_s=0.5,  # the write answers after 1.5 s: the effect is left in doubt
        )
        assert c.post("/v1/tools", json=body).status_code == 201
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        thread, answers = call_tool_in_background(server, "doubtful_write", "p", "t1")
        wait_until(lambda: writes.requests == 1)
        cancelled = c.post("/v1/programs/p/nodes/t1/cancel").json()
        thread.join(30)
        call = {"program_id": "p", "node_id": "t1", "arguments": ARGUMENTS}
        retried = c.post("/v1/tools/doubtful_write/call", json=call)
    assert cancelled["flagged_tools"] == ["t1"]
    (answer,) = answers
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["type"] == "needs_reconcile"
    assert retried.status_code == 409, retried.text
    assert retried.json()["error"]["type"] == "needs_reconcile"  # as the first answer
    assert writes.requests == 1
