"""Cancelling one node of a running program (``POST /v1/programs/{id}/nodes/{node}/cancel``),
over real HTTP with the simulated runtime, the DuckDB store and the gateway: a speculative
branch dropped. Its call is aborted in the engine (confirmed before the answer), its
descendants not yet ended are cancelled, the program runs on and adds nodes, but none under a
cancelled node (409); a read-only tool of it is interrupted, a side effect let run to its
commit and its end recorded on its node; the cancel is tenant-scoped, audited for an operator
key, and a restart keeps it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.events import EventKind
from tests.server.api.background import call_tool_in_background
from tests.server.api.harness import (
    OPERATOR,
    LiveServer,
    chat_body,
    make_config,
    node_view,
    wait_until,
)
from tests.server.api.test_api_cancel_effects import (
    WRITE_S,
    _downstream,
    _gateway_server,
    _hub_events,
    _register,
    _served_tool,
)


def _slow_server(db: Path) -> LiveServer:
    """A slower simulated runtime: a call of 2,000 tokens runs for seconds."""
    return LiveServer(make_config(db, runtime_extra={"time_scale": 0.5}))


def _call(
    c: httpx.Client, pid: str, node: str, parents: list[str] | None = None, **extra: Any
) -> httpx.Response:
    body = chat_body("go", max_tokens=extra.pop("max_tokens", 8), **extra)
    body["agentconsole"] = {"program_id": pid, "node_id": node}
    if parents is not None:
        body["agentconsole"]["parent_ids"] = parents
    return c.post("/v1/chat/completions", json=body)


def _long_call_in_background(
    server: LiveServer, pid: str, node: str
) -> tuple[threading.Thread, list[httpx.Response]]:
    answers: list[httpx.Response] = []

    def run() -> None:
        with server.client() as c:
            answers.append(_call(c, pid, node, ["root"], max_tokens=2000, ignore_eos=True))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, answers


def test_a_node_cancel_aborts_its_call_and_its_branch_while_the_program_runs_on(
    tmp_path: Path,
) -> None:
    with _slow_server(tmp_path / "branch.duckdb") as server:
        server.wait_ready()
        with server.client() as c:
            assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
            assert _call(c, "p", "root").status_code == 200
            thread, answers = _long_call_in_background(server, "p", "spec")
            wait_until(lambda: node_view(c, "p", "spec").get("state") == "running")
            # a node the agent declared under the speculative one, not started yet
            child = {"node_id": "spec-next", "kind": "llm", "parents": ["spec"]}
            assert c.post("/v1/programs/p/nodes", json=child).status_code == 201
            cancelled = c.post("/v1/programs/p/nodes/spec/cancel")
            in_flight = server.run(_in_flight(server, "p"))
            thread.join(30)
            spec, spec_next = node_view(c, "p", "spec"), node_view(c, "p", "spec-next")
            under_it = _call(c, "p", "later", ["spec"])
            rerun = _call(c, "p", "spec", ["root"])
            declared_under = c.post(
                "/v1/programs/p/nodes", json={"node_id": "x", "kind": "llm", "parents": ["spec"]}
            )
            # the program runs on: a new call, its parents defaulted past the cancelled branch
            goes_on = _call(c, "p", "main-2")
            again = c.post("/v1/programs/p/nodes/spec/cancel")
            program = c.get("/v1/programs/p").json()
        events = [e for e in _hub_events(server) if e.program_id == "p"]
    assert cancelled.status_code == 200, cancelled.text
    report = cancelled.json()
    assert report["program_id"] == "p"
    assert report["node_id"] == "spec"
    assert report["state"] == "cancelled"
    assert report["program_state"] == "running"
    assert report["cancelled_nodes"] == ["spec", "spec-next"]
    assert len(report["aborted_calls"]) == 1
    assert report["interrupted_tools"] == report["flagged_tools"] == report["running_tools"] == []
    assert in_flight == 0  # the abort was confirmed out of the runtime before the answer
    (answer,) = answers
    assert answer.status_code == 409, answer.text  # the aborted call's client is told
    assert spec["state"] == spec_next["state"] == "cancelled"
    assert spec["withdrawn"]
    assert spec_next["withdrawn"]
    for refused in (under_it, rerun, declared_under):
        assert refused.status_code == 409, refused.text
        assert "was cancelled" in refused.json()["error"]["message"]
    assert goes_on.status_code == 200, goes_on.text
    assert _parents(program, "main-2") == ["root"]
    assert again.status_code == 200, again.text  # a retry: nothing more to cancel
    assert again.json()["cancelled_nodes"] == again.json()["aborted_calls"] == []
    assert program["state"] == "running"
    aborted = [e for e in events if e.kind is EventKind.CALL_ABORTED]
    assert [e.node_id for e in aborted] == ["spec"]
    by_request = [e for e in events if e.kind is EventKind.NODE_CANCELLED]
    assert [(e.node_id, e.data.get("withdrawn"), e.data.get("by")) for e in by_request] == [
        ("spec", True, "user"),
        ("spec-next", True, "user"),
    ]


async def _in_flight(server: LiveServer, pid: str) -> int:
    return len(server.live.service.calls_of(pid))


def _parents(program: dict[str, Any], node_id: str) -> list[str]:
    (node,) = [n for n in program["nodes"] if n["node_id"] == node_id]
    parents: list[str] = node["parents"]
    return parents


def test_a_node_cancel_is_refused_where_it_cannot_act_and_audited_for_an_operator(
    tmp_path: Path,
) -> None:
    with LiveServer(make_config(tmp_path / "refusals.duckdb")) as server:
        server.wait_ready()
        with server.client() as c, server.client("sk-b") as other, server.client(OPERATOR) as op:
            assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
            assert _call(c, "p", "done").status_code == 200
            declared = {"node_id": "later", "kind": "llm", "parents": ["done"]}
            assert c.post("/v1/programs/p/nodes", json=declared).status_code == 201
            foreign = other.post("/v1/programs/p/nodes/later/cancel")
            unknown_node = c.post("/v1/programs/p/nodes/nope/cancel")
            unknown_program = c.post("/v1/programs/nope/nodes/later/cancel")
            finished_node = c.post("/v1/programs/p/nodes/done/cancel")
            by_operator = op.post("/v1/programs/p/nodes/later/cancel")
            # the operator route answers as the tenant's, for any tenant's program
            assert c.post("/v1/programs", json={"program_id": "q"}).status_code == 201
            c.post("/v1/programs/q/nodes", json={"node_id": "n", "kind": "llm"})
            operator_route = op.post("/v1/operator/programs/q/nodes/n/cancel")
            assert c.post("/v1/programs/p/finish", json={"success": True}).status_code == 200
            ended = c.post("/v1/programs/p/nodes/later/cancel")
            audit = op.get("/v1/operator/audit").json()
            node = node_view(c, "p", "later")
        events = _hub_events(server)
    assert foreign.status_code == 404, foreign.text  # another tenant's program: unknown
    assert unknown_node.status_code == 404, unknown_node.text
    assert unknown_program.status_code == 404, unknown_program.text
    assert finished_node.status_code == 409, finished_node.text
    assert by_operator.status_code == 200, by_operator.text
    assert by_operator.json()["cancelled_nodes"] == ["later"]
    assert operator_route.status_code == 200, operator_route.text
    assert operator_route.json()["cancelled_nodes"] == ["n"]
    assert ended.status_code == 409, ended.text
    assert node["state"] == "cancelled"
    rows = [r for r in audit["actions"] if r["action"] == "cancel_node"]
    assert {(r["target"], r["result"]) for r in rows} == {("p", "ok"), ("q", "ok")}
    actions = [e.data for e in events if e.kind is EventKind.OPERATOR_ACTION]
    assert {"action": "cancel_node", "target": "p", "result": "ok"}.items() <= {
        **next(a for a in actions if a.get("action") == "cancel_node")
    }.items()
    cancels = [e for e in events if e.kind is EventKind.NODE_CANCELLED and e.program_id == "p"]
    assert (cancels[0].node_id, cancels[0].data.get("by")) == ("later", "operator")


def test_a_node_cancel_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "restart.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client() as c:
            assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
            assert _call(c, "p", "root").status_code == 200
            branch = {"node_id": "spec", "kind": "llm", "parents": ["root"]}
            assert c.post("/v1/programs/p/nodes", json=branch).status_code == 201
            assert c.post("/v1/programs/p/nodes/spec/cancel").status_code == 200
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        with second.client() as c:
            node = node_view(c, "p", "spec")
            under_it = _call(c, "p", "later", ["spec"])
            goes_on = _call(c, "p", "next", ["root"])
    assert node["state"] == "cancelled"
    assert node["withdrawn"] is True
    assert under_it.status_code == 409, under_it.text
    assert goes_on.status_code == 200, goes_on.text


def test_a_node_cancel_stops_a_read_only_tool_and_lets_a_side_effect_end_on_its_node(
    tmp_path: Path,
) -> None:
    with _downstream() as served, _gateway_server(tmp_path / "tools.duckdb") as server:
        server.wait_ready()
        with server.client() as c:
            read = _register(c, served.url, side_effect=False)
            write = _register(c, served.url, side_effect=True)
            answers: dict[str, list[httpx.Response]] = {}
            threads = []
            for pid, tool in (("r", read), ("w", write)):
                assert c.post("/v1/programs", json={"program_id": pid}).status_code == 201
                thread, answers[pid] = call_tool_in_background(server, tool, pid)
                threads.append(thread)
            for pid in ("r", "w"):
                wait_until(lambda pid=pid: node_view(c, pid, "t1").get("state") == "running")
            stopped = c.post("/v1/programs/r/nodes/t1/cancel").json()
            flagged = c.post("/v1/programs/w/nodes/t1/cancel").json()
            for thread in threads:
                thread.join(30)
            read_node, write_node = node_view(c, "r", "t1"), node_view(c, "w", "t1")
            program = c.get("/v1/programs/w").json()
        events = [e for e in _hub_events(server) if e.node_id == "t1"]
    assert stopped["interrupted_tools"] == ["t1"]
    assert stopped["flagged_tools"] == []
    assert flagged["flagged_tools"] == ["t1"]
    assert flagged["interrupted_tools"] == []
    (read_answer,) = answers["r"]
    assert read_answer.status_code == 409, read_answer.text
    assert "node was cancelled" in read_answer.json()["error"]["message"]
    (write_answer,) = answers["w"]
    assert write_answer.status_code == 200, write_answer.text  # the effect committed
    assert read_node["outcome_after_cancel"] is None
    assert read_node["tool_s"] == 0.0
    assert write_node["state"] == "cancelled"
    assert write_node["outcome_after_cancel"] == "ok"
    assert write_node["tool_s"] >= WRITE_S * 0.9
    assert program["state"] == "running"
    late = [e for e in events if e.program_id == "w" and e.kind is EventKind.TOOL_FINISHED]
    assert [e.data["after_cancel"] for e in late] == [True]
    assert not [e for e in events if e.program_id == "r" and e.kind is EventKind.TOOL_FINISHED]


@pytest.mark.parametrize("success", [True, False])
def test_a_side_effect_that_ends_after_the_agent_finished_is_recorded_on_its_node(
    tmp_path: Path, success: bool
) -> None:
    db = tmp_path / "finished.duckdb"
    with _downstream() as writes:
        with _served_tool(db, writes, side_effect=True) as (server, c, tool):
            assert c.post("/v1/programs", json={"program_id": "f"}).status_code == 201
            thread, answers = call_tool_in_background(server, tool, "f")
            wait_until(lambda: node_view(c, "f", "t1").get("state") == "running")
            finish = c.post("/v1/programs/f/finish", json={"success": success})
            at_finish = node_view(c, "f", "t1")
            thread.join(30)
            node = node_view(c, "f", "t1")
            program = c.get("/v1/programs/f").json()
            events = [e for e in _hub_events(server) if e.program_id == "f"]
        with _gateway_server(db) as again:
            again.wait_ready()
            with again.client() as c:
                stored = node_view(c, "f", "t1")
    assert finish.status_code == 200, finish.text
    assert at_finish["outcome_after_cancel"] is None  # still running
    assert answers[0].status_code == 200, answers[0].text
    assert program["state"] == ("finished" if success else "failed")
    assert node["state"] == "cancelled"
    assert node["outcome_after_cancel"] == "ok"
    assert node["tool_s"] >= WRITE_S * 0.9
    assert node["finished_at"] > program["finished_at"]
    late = [e for e in events if e.kind is EventKind.TOOL_FINISHED]
    assert [(e.data.get("after_finish"), e.data["outcome"]) for e in late] == [(True, "ok")]
    assert stored["outcome_after_cancel"] == "ok"
    assert stored["tool_s"] == pytest.approx(node["tool_s"])


def test_a_tool_node_cancelled_before_it_ran_takes_no_report(tmp_path: Path) -> None:
    """The agent's reports of a tool its node cancel took before it started: its start and
    its finish are refused as the node's cancel (409), and nothing is recorded on the node:
    nothing of it ran at the cancel, so no end of it can be late."""
    with _gateway_server(tmp_path / "reports.duckdb") as server:
        server.wait_ready()
        with server.client() as c:
            assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
            declared = {"node_id": "t", "kind": "tool", "tool": "own_tool"}
            assert c.post("/v1/programs/p/nodes", json=declared).status_code == 201
            assert c.post("/v1/programs/p/nodes/t/cancel").status_code == 200
            finish = {"node_id": "t", "outcome": "ok", "latency_s": 0.5}
            finished = c.post("/v1/programs/p/tool-calls/finish", json=finish)
            started = c.post(
                "/v1/programs/p/tool-calls/start", json={"node_id": "t", "tool": "own_tool"}
            )
            node = node_view(c, "p", "t")
            program = c.get("/v1/programs/p").json()
    for refused in (finished, started):
        assert refused.status_code == 409, refused.text
        assert "was cancelled" in refused.json()["error"]["message"]
    assert node["state"] == "cancelled"
    assert node["withdrawn"] is True
    assert node["outcome_after_cancel"] is None
    assert node["attempts"] == 0
    assert program["state"] == "running"
