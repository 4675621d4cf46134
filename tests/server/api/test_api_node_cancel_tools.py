"""A node cancel and the gateway's tools, over real HTTP (simulated runtime, DuckDB store, a
loopback ``http`` tool): what the cancel answers is what the gateway did.

A tool call the model asked for and the agent runs through the gateway under the model's call
id is interrupted by its node's cancel (the server's node, ``tool-...``), and once cancelled it
does not run under that id on a node of its own. Only a tool the gateway really stopped is
``interrupted``: one whose run had ended and was committing ends on its cancelled node, and one
whose start the cancel overtook does not run. A retry of a call that committed on a cancelled
node reads its result back, as on a cancelled program.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from agentconsole.scheduler.events import EventKind
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from agentconsole.server.gateway.runner import Runner
from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until
from tests.server.api.test_api_cancel_effects import _downstream, _hub_events, _register
from tests.server.gateway.helpers import tool_body

ARGUMENTS = {"text": "row 7"}


@contextmanager
def _served(db: Path) -> Iterator[tuple[LiveServer, httpx.Client, Runner]]:
    """A ready server whose tenants may register a loopback ``http`` tool, a tenant's client,
    and the gateway's runner."""
    extension = GatewayExtension(
        GatewayConfig(tenant_builtins=None, allow_private_executor_urls=True)
    )
    with LiveServer(make_config(db), extensions=[extension]) as server:
        server.wait_ready()
        assert extension.gateway is not None
        with server.client() as c:
            yield server, c, extension.gateway.runner


def _gateway_call(
    server: LiveServer, tool: str, pid: str, node: str
) -> tuple[threading.Thread, list[httpx.Response]]:
    """Call ``tool`` for ``node`` of ``pid`` through the gateway in a thread; the list gets its
    answer."""
    answers: list[httpx.Response] = []
    call = {"program_id": pid, "node_id": node, "arguments": ARGUMENTS}

    def run() -> None:
        with server.client() as c:
            answers.append(c.post(f"/v1/tools/{tool}/call", json=call))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, answers


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


def _node(c: httpx.Client, pid: str, node: str) -> dict[str, Any]:
    answer: dict[str, Any] = c.get(f"/v1/programs/{pid}/nodes/{node}").json()
    return answer


def test_a_node_cancel_interrupts_the_gateway_run_of_a_tool_call_the_model_asked_for(
    tmp_path: Path,
) -> None:
    with _downstream() as reads, _served(tmp_path / "asked.duckdb") as (server, c, _):
        tool = _register(c, reads.url, side_effect=False)
        call_id, node = _model_asks(c, "m", tool)
        thread, answers = _gateway_call(server, tool, "m", call_id)
        wait_until(lambda: reads.requests == 1)
        cancelled = c.post(f"/v1/programs/m/nodes/{node}/cancel")
        thread.join(30)
        ended = _node(c, "m", node)
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
    with _downstream(delay_s=0.1) as reads, _served(tmp_path / "gone.duckdb") as (server, c, _):
        tool = _register(c, reads.url, side_effect=False)
        call_id, node = _model_asks(c, "m", tool)
        cancelled = c.post(f"/v1/programs/m/nodes/{node}/cancel")
        thread, answers = _gateway_call(server, tool, "m", call_id)
        thread.join(30)
        program = c.get("/v1/programs/m").json()
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["cancelled_nodes"] == [node]
    (answer,) = answers
    assert answer.status_code == 409, answer.text
    assert "was cancelled" in answer.json()["error"]["message"]
    assert reads.requests == 0  # the tool did not run
    assert sorted(n["node_id"] for n in program["nodes"]) == sorted(["ask", node])


class _HeldCommits:
    """The runner's intents with each commit held until :attr:`release` is set (after
    :attr:`reached`): a tool whose executor finished and waits for its commit."""

    def __init__(self, intents: Any) -> None:
        self._intents = intents
        self.reached = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._intents, name)

    def commit(self, *args: Any) -> concurrent.futures.Future[Any]:
        held: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def later() -> None:
            self.reached.set()
            self.release.wait(30)
            try:
                held.set_result(self._intents.commit(*args).result())
            except Exception as error:  # the runner sees the store's own failure
                held.set_exception(error)

        threading.Thread(target=later, daemon=True).start()
        return held


def test_a_read_only_tool_committing_at_its_node_cancel_ends_on_its_node(
    tmp_path: Path,
) -> None:
    with (
        _downstream(delay_s=0.1) as reads,
        _served(tmp_path / "commit.duckdb") as (server, c, runner),
    ):
        tool = _register(c, reads.url, side_effect=False)
        held = _HeldCommits(runner.intents)
        runner.intents = held  # type: ignore[assignment]
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        thread, answers = _gateway_call(server, tool, "p", "t1")
        assert held.reached.wait(10)  # its executor answered; the result is not committed
        cancelled = c.post("/v1/programs/p/nodes/t1/cancel")
        held.release.set()
        thread.join(30)
        node = _node(c, "p", "t1")
        events = [e for e in _hub_events(server) if e.node_id == "t1"]
    assert cancelled.status_code == 200, cancelled.text
    report = cancelled.json()
    assert report["interrupted_tools"] == []  # nothing was left to stop
    assert report["running_tools"] == ["t1"]  # its end is still to come, and is recorded
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "committed"
    assert node["state"] == "cancelled"
    assert node["outcome_after_cancel"] == "ok"
    late = [e for e in events if e.kind is EventKind.TOOL_FINISHED]
    assert [e.data["after_cancel"] for e in late] == [True]


def test_a_node_cancel_during_the_tools_start_stops_it_before_it_runs(tmp_path: Path) -> None:
    with _downstream(delay_s=0.1) as reads, _served(tmp_path / "start.duckdb") as (server, c, _):
        tool = _register(c, reads.url, side_effect=False)
        service = server.live.service
        real = service.settled
        reached, release = threading.Event(), threading.Event()

        async def held(actions: Any = None) -> None:
            # the start's own settle (a cache hint to an engine may take a while) is held
            if sys._getframe(1).f_code.co_name == "tool_started" and not reached.is_set():
                reached.set()
                while not release.is_set():
                    await asyncio.sleep(0.01)
            await real(actions)

        service.settled = held  # type: ignore[method-assign]
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        thread, answers = _gateway_call(server, tool, "p", "t1")
        assert reached.wait(10)
        cancelled = c.post("/v1/programs/p/nodes/t1/cancel")
        release.set()
        thread.join(30)
        node = _node(c, "p", "t1")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["interrupted_tools"] == []  # nothing ran to stop
    (answer,) = answers
    assert answer.status_code == 409, answer.text
    assert "was cancelled" in answer.json()["error"]["message"]
    assert reads.requests == 0  # it did not run on its cancelled node
    assert node["state"] == "cancelled"
    assert node["outcome_after_cancel"] is None


def test_a_retry_of_a_call_that_committed_on_a_cancelled_node_reads_its_result(
    tmp_path: Path,
) -> None:
    with _downstream() as writes, _served(tmp_path / "retry.duckdb") as (server, c, _):
        tool = _register(c, writes.url, side_effect=True)
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        thread, answers = _gateway_call(server, tool, "p", "t1")
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
    with _downstream() as writes, _served(tmp_path / "doubt.duckdb") as (server, c, _):
        body = tool_body(
            "doubtful_write",
            {"type": "http", "url": writes.url},
            side_effect=True,
            idempotent=False,
            timeout_s=0.5,  # the write answers after 1.5 s: the effect is left in doubt
        )
        assert c.post("/v1/tools", json=body).status_code == 201
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        thread, answers = _gateway_call(server, "doubtful_write", "p", "t1")
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
