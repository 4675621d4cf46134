"""Programs survive a restart: a running program's DAG, its standing and its quotas are
rebuilt from the store at start, and its next call continues the DAG."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config


def test_a_restarted_server_shows_a_running_programs_nodes_and_continues_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "restart.duckdb"
    body = chat_body("plan the trip", max_tokens=8, agentconsole={"program_id": "trip"})
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client() as c:
            created = c.post(
                "/v1/programs", json={"program_id": "trip", "quotas": {"tokens": 10_000}}
            )
            assert created.status_code == 201
            assert c.post("/v1/chat/completions", json=body).status_code == 200
            tool = {"node_id": "search", "kind": "tool", "tool": "web_search"}
            assert c.post("/v1/programs/trip/nodes", json=tool).status_code == 201
            before = c.get("/v1/programs/trip").json()
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        # in memory again (not only readable from the store): the controller has it
        assert "trip" in second.live.service.controller.programs
        with second.client() as c:
            after = c.get("/v1/programs/trip").json()
            assert after["state"] == "running"
            assert [n["node_id"] for n in after["nodes"]] == ["llm-1", "search"]
            # the call's max_tokens is shown and survives (a what-if replay reads it)
            assert [n["max_tokens"] for n in before["nodes"]] == [8, None]
            assert [n["max_tokens"] for n in after["nodes"]] == [8, None]
            assert after["tokens_used"] == before["tokens_used"] > 0
            assert after["attained_service_s"] == before["attained_service_s"]
            assert after["quotas"]["tokens"] == 10_000
            # the next call continues the DAG: its parent is the tool node added before
            nxt = c.post("/v1/chat/completions", json=body)
            assert nxt.status_code == 200, nxt.text
            assert nxt.headers["X-Node-Id"] == "llm-3"
            last = c.get("/v1/programs/trip").json()["nodes"][-1]
            assert last["parents"] == ["search"]
        with second.client("sk-b") as other:  # still no one else's
            assert other.get("/v1/programs/trip").status_code == 404


def test_a_call_cut_by_the_restart_is_closed_and_can_run_again(tmp_path: Path) -> None:
    db = tmp_path / "cut.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()

        async def queue_a_call() -> None:
            from agentconsole.server.live.intake import ChatCall

            chat = ChatCall([{"role": "user", "content": "x"}], 4000, program_id="cut")
            chat = ChatCall(chat.messages, 4000, program_id="cut", node_id="long", ignore_eos=True)
            await first.live.service.start_call("tenant-a", chat)
            await first.live.queries.projector.sync()

        first.run(queue_a_call())
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        with second.client() as c:
            (node,) = c.get("/v1/programs/cut").json()["nodes"]
            # its call died with the old process: closed (cancelled at a clean shutdown,
            # failed after a crash: test_reopen_closes_an_llm_call_the_restart_cut)
            assert node["state"] in ("cancelled", "failed")
            again = chat_body(
                "x", max_tokens=4, agentconsole={"program_id": "cut", "node_id": "long"}
            )
            assert c.post("/v1/chat/completions", json=again).status_code == 200


def test_reopen_closes_an_llm_call_the_restart_cut() -> None:
    from agentconsole.server.live.eventtail import INTERRUPTED
    from agentconsole.server.live.reopen import rebuild
    from agentconsole.server.store.records import AttemptRecord, NodeRecord, ProgramRecord
    from agentconsole.server.store.repository import ProgramView

    view = ProgramView(
        ProgramRecord("p", "t", "running", 1.0, 2.0, data={"tokens_used": 40}),
        (
            NodeRecord("p", "n1", "llm", "running", 1.0, 2.0, (), 1, {"branch": "main"}),
            NodeRecord("p", "t1", "tool", "running", 1.5, 2.0, (), 1, {"tool": "search"}),
        ),
        (
            AttemptRecord("p", "n1", 1, "running", 1.2),
            AttemptRecord("p", "t1", 1, "running", 1.6),
        ),
    )
    program = rebuild(view, now=9.0)
    llm, tool = program.nodes["n1"], program.nodes["t1"]
    assert llm.state.value == "failed"
    assert llm.attempts[-1].outcome == INTERRUPTED
    assert tool.state.value == "running"  # the agent still reports its end
    assert tool.tool is not None
    assert tool.tool.name == "search"
    assert program.tokens_used == 40


def test_a_tool_nodes_whole_spec_survives_a_restart(tmp_path: Path) -> None:
    """A side-effecting tool stays one after a restart (its kind, effect, idempotency and
    timeout rebuilt from the stored row, and from the event tail when no row was written),
    so a failed attempt of it is still never retried by itself."""
    from agentconsole.scheduler.program import ToolKind, ToolSpec

    spec = ToolSpec("deploy", ToolKind.HTTP, side_effect=True, idempotent=False, timeout_s=30.0)
    db = tmp_path / "spec.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()

        async def add_the_tool() -> None:
            tools = first.live.service.tools
            await tools.ensure_tool_node("tenant-a", "ship", "push", spec)
            await tools.tool_started("ship", "push")
            await first.live.queries.projector.sync()

        first.run(add_the_tool())
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        node = second.live.service.controller.programs["ship"].nodes["push"]
        assert node.tool == spec
        with second.client() as c:
            shown = c.get("/v1/programs/ship/nodes/push").json()
            assert (shown["tool"], shown["tool_kind"], shown["side_effect"]) == (
                "deploy",
                "http",
                True,
            )
        _, retry = second.live.service.controller.finish_tool(
            "ship", "push", 99.0, outcome="timeout", latency_s=30.0
        )
        assert not retry  # a side effect with no key is never re-run


def test_the_event_tail_rebuilds_a_tool_nodes_whole_spec() -> None:
    """A program with no row yet is rebuilt from its events: its tool node's spec comes back
    whole from ``node.added``; what an older version stored (a name only) takes defaults."""
    from agentconsole.scheduler.controller import ProgramController
    from agentconsole.scheduler.events import EventKind, EventLog
    from agentconsole.scheduler.program import Node, NodeKind, ToolKind, ToolSpec
    from agentconsole.server.live.eventtail import TailReplay, created_program
    from agentconsole.server.live.servicemodel import OnlineServiceModel

    log = EventLog()
    controller = ProgramController(log, OnlineServiceModel())
    controller.open_program("p", "t", 1.0)
    spec = ToolSpec("deploy", ToolKind.HTTP, side_effect=True, idempotent=False, timeout_s=9.0)
    controller.add_node("p", Node("push", "p", NodeKind.TOOL, tool=spec), 2.0)
    created, *rest = log.events
    assert created.kind is EventKind.PROGRAM_CREATED
    tail = TailReplay(created_program(created), {}, 0)
    for seq, event in enumerate(rest, start=2):
        tail.apply(seq, event)
    assert tail.program.nodes["push"].tool == spec
    assert ToolSpec.from_fields({"tool": "old"}) == ToolSpec("old")  # an older row: defaults
    assert ToolSpec.from_fields({"tool": "x", "tool_kind": "nonsense"}) == ToolSpec("x")
    assert ToolSpec.from_fields({"tool": ""}) is None


def test_a_program_rebuilt_after_a_restart_counts_when_it_finishes(tmp_path: Path) -> None:
    """Rebuilding emits no ``program.created``, so the new server's metrics must be told of
    the program: its finish counts in the overview and its E2E (from its creation before the
    restart) in the percentiles, as Prometheus' histogram counts it."""
    db = tmp_path / "finish.duckdb"
    body = chat_body("plan the trip", max_tokens=8, agentconsole={"program_id": "trip"})
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client() as c:
            assert c.post("/v1/chat/completions", json=body).status_code == 200
            created = c.get("/v1/programs/trip").json()["created_at"]
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        with second.client() as c:
            assert c.post("/v1/programs/trip/finish", json={}).status_code == 200
            finished = c.get("/v1/programs/trip").json()["finished_at"]
        second.live.observer.report_ttl_s = 0.0  # percentiles as of now, not a cached report
        with second.client(OPERATOR) as ops:
            overview = ops.get("/v1/overview").json()
    assert overview["programs"]["finished"] == 1
    assert overview["e2e_p50_s"] == pytest.approx(finished - created)
    assert overview["e2e_p95_s"] == pytest.approx(finished - created)
