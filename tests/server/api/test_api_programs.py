"""Programs and the DAG endpoint over real HTTP, persisted in the DuckDB file."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until


def _call(
    client: httpx.Client, pid: str, node: str, parents: list[str] | None = None
) -> dict[str, Any]:
    extras: dict[str, object] = {"program_id": pid, "node_id": node}
    if parents is not None:
        extras["parent_ids"] = parents
    body = chat_body(f"{pid} {node}", agentconsole=extras)
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()
    return out


def test_create_get_finish_and_dag(server: LiveServer) -> None:
    with server.client() as c:
        created = c.post(
            "/v1/programs",
            json={"program_id": "dag-1", "labels": {"team": "x"}, "quotas": {"tokens": 10**6}},
        )
        assert created.status_code == 201
        assert created.json()["state"] == "running"
        assert created.json()["quotas"]["tokens"] == 10**6
        assert c.post("/v1/programs", json={"program_id": "dag-1"}).status_code == 409
        _call(c, "dag-1", "plan")
        tool = {"node_id": "search", "kind": "tool", "parents": ["plan"], "tool": "web"}
        assert c.post("/v1/programs/dag-1/nodes", json=tool).status_code == 201
        # declaring it again the same way is a retry (the node as it is), otherwise 409
        again = c.post("/v1/programs/dag-1/nodes", json=tool)
        assert again.status_code == 201
        assert again.json()["node_id"] == "search"
        others: list[dict[str, object]] = [
            {"parents": []},
            {"tool": "fetch"},
            {"branch": "repair"},
        ]
        for other in others:
            redeclared = c.post("/v1/programs/dag-1/nodes", json={**tool, **other})
            assert redeclared.status_code == 409, other
        as_llm = {"node_id": "search", "kind": "llm", "parents": ["plan"]}
        assert c.post("/v1/programs/dag-1/nodes", json=as_llm).status_code == 409
        _call(c, "dag-1", "answer", ["plan", "search"])
        detail = c.get("/v1/programs/dag-1").json()
        assert {n["node_id"] for n in detail["nodes"]} == {"plan", "search", "answer"}
        assert ["plan", "answer"] in detail["edges"]
        assert ["search", "answer"] in detail["edges"]
        assert detail["critical_path"][-1] == "answer"
        answer = c.get("/v1/programs/dag-1/nodes/answer").json()
        assert answer["state"] == "done"
        assert answer["output_tokens"] > 0
        assert [p["phase"] for p in answer["timeline"]][-1] == "decode"
        assert c.get("/v1/programs/dag-1/nodes/nope").status_code == 404
        finished = c.post("/v1/programs/dag-1/finish", json={"success": True}).json()
        assert finished["state"] == "finished"
        assert finished["finished_at"] is not None
        assert (
            c.post(
                "/v1/chat/completions", json=chat_body(agentconsole={"program_id": "dag-1"})
            ).status_code
            == 409
        )


def test_list_filters_and_total(server: LiveServer) -> None:
    with server.client("sk-b") as c:
        for i in range(3):
            c.post("/v1/programs", json={"program_id": f"lst-{i}", "labels": {"batch": "l"}})
        c.post("/v1/programs/lst-0/finish", json={"success": True})
        page = c.get("/v1/programs", params={"label": "batch:l", "limit": 2}).json()
        assert page["total"] == 3
        assert len(page["programs"]) == 2
        running = c.get("/v1/programs", params={"label": "batch:l", "state": "running"}).json()
        assert {p["program_id"] for p in running["programs"]} == {"lst-1", "lst-2"}
        summary = running["programs"][0]
        for key in ("nodes_done", "attained_service_s", "priority_key", "deadline_slack_s"):
            assert key in summary


def test_unidentified_calls_join_an_inferred_program(server: LiveServer) -> None:
    first = [{"role": "user", "content": "inferred chain start 7f3a"}]
    with server.client() as c:
        one = c.post("/v1/chat/completions", json={"model": "m", "messages": first}).json()
        reply = one["choices"][0]["message"]["content"]
        second = [
            *first,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "more"},
        ]
        two = c.post("/v1/chat/completions", json={"model": "m", "messages": second}).json()
        other = c.post("/v1/chat/completions", json=chat_body("unrelated 9e1c")).json()
    pid = one["agentconsole"]["program_id"]
    assert pid.startswith("inferred-")
    assert two["agentconsole"]["program_id"] == pid
    assert other["agentconsole"]["program_id"] != pid
    with server.client() as c:
        node = c.get(f"/v1/programs/{pid}/nodes/{two['agentconsole']['node_id']}").json()
    assert node["parents"] == [one["agentconsole"]["node_id"]]


def test_headers_carry_identity(server: LiveServer) -> None:
    with server.client() as c:
        headers = {"X-Program-Id": "hdr-1", "X-Node-Id": "n1"}
        response = c.post("/v1/chat/completions", json=chat_body(rid="my-rid"), headers=headers)
        assert response.headers["x-program-id"] == "hdr-1"
        assert response.headers["x-node-id"] == "n1"
        assert response.headers["x-request-id"] == "my-rid"
        headers = {"X-Program-Id": "hdr-1", "X-Node-Id": "n2", "X-Parent-Ids": "n1"}
        c.post("/v1/chat/completions", json=chat_body(), headers=headers)
        assert c.get("/v1/programs/hdr-1/nodes/n2").json()["parents"] == ["n1"]


def test_programs_survive_in_the_store(server: LiveServer) -> None:
    with server.client() as c:
        c.post("/v1/programs", json={"program_id": "stored-1"})
        c.get("/v1/programs")  # syncs the projector
    server.run(_forget(server, "stored-1"))
    with server.client() as c:
        stored = c.get("/v1/programs/stored-1")
    assert stored.status_code == 200
    assert stored.json()["tenant"] == "tenant-a"
    with server.client("sk-b") as c:
        assert c.get("/v1/programs/stored-1").status_code == 404


async def _forget(server: LiveServer, pid: str) -> None:
    server.live.service.forget(pid)


WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def test_finish_closes_a_tool_call_never_answered_as_abandoned(server: LiveServer) -> None:
    with server.client() as c:
        body = chat_body("Weather in Paris?", tools=WEATHER, agentconsole={"program_id": "ab"})
        asked = c.post("/v1/chat/completions", json=body).json()
        assert asked["choices"][0]["finish_reason"] == "tool_calls"
        assert c.post("/v1/programs/ab/finish", json={"success": True}).status_code == 200
        program = c.get("/v1/programs/ab").json()
    (tool,) = [n for n in program["nodes"] if n["kind"] == "tool"]
    assert tool["state"] == "cancelled"  # closed with the outcome "abandoned"
    assert tool["finished_at"] is not None
    assert program["state"] == "finished"


def test_a_first_call_naming_unknown_parents_opens_no_program(server: LiveServer) -> None:
    with server.client() as c:
        body = chat_body("hi", agentconsole={"program_id": "orphan", "parent_ids": ["nope"]})
        refused = c.post("/v1/chat/completions", json=body)
        assert refused.status_code == 404  # as another tenant's program (test_api_tenancy)
        assert refused.json()["error"]["field"] == "program_id"
        assert c.get("/v1/programs/orphan").status_code == 404
        # the same id with a valid first call is a fresh program
        _call(c, "orphan", "plan")
        assert c.get("/v1/programs/orphan").json()["state"] == "running"
        # in a program of its own, an unknown parent is refused naming the chat's field
        refused = c.post("/v1/chat/completions", json=body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error.get("param", error.get("field")) == "agentconsole.parent_ids"


def test_tokens_of_a_call_in_flight_show_while_it_generates(server: LiveServer) -> None:
    body = chat_body("write at length", agentconsole={"program_id": "inflight", "node_id": "w"})
    body.update(max_tokens=30_000, ignore_eos=True)  # tens of seconds at the harness's speed
    answered: list[httpx.Response] = []

    def call() -> None:
        with server.client(timeout=60) as c:
            answered.append(c.post("/v1/chat/completions", json=body))

    caller = threading.Thread(target=call)
    caller.start()
    try:
        with server.client() as c:
            deadline = time.monotonic() + 20
            while True:  # a non-streamed call: nothing reaches its client until the end
                found = c.get("/v1/programs/inflight")
                if found.status_code == 200 and found.json()["tokens_used"] > 0:
                    break
                assert time.monotonic() < deadline, "no tokens counted while generating"
                time.sleep(0.05)
            program = found.json()
            node = c.get("/v1/programs/inflight/nodes/w").json()
            assert node["state"] == "running"
            assert 0 < program["nodes"][0]["output_tokens"] <= node["output_tokens"]
            assert program["tokens_used"] <= node["output_tokens"]
            listed = c.get("/v1/programs", params={"state": "running"}).json()["programs"]
            assert next(p for p in listed if p["program_id"] == "inflight")["tokens_used"] > 0
            assert c.post("/v1/programs/inflight/cancel").status_code == 200
    finally:
        caller.join(30)
    assert answered
    assert answered[0].status_code != 200 or answered[0].json()["usage"]["completion_tokens"] > 0


def test_a_node_run_again_shows_its_last_run_and_its_aborted_calls_prompt(
    server: LiveServer,
) -> None:
    """A node whose first call was aborted and then ran again: its timeline drew a decode
    from the first call's first token to the second's end (5 s for a 0.4 s retry), and the
    aborted call's prompt was missing from the node (0) though its program paid for it."""
    extras = {"program_id": "again", "node_id": "n1"}
    body = chat_body("write at length", agentconsole=extras)
    body.update(max_tokens=30_000, ignore_eos=True)  # tens of seconds at the harness's speed
    with server.client() as c:
        with server.client(timeout=1.0) as impatient, contextlib.suppress(httpx.TimeoutException):
            impatient.post("/v1/chat/completions", json=body)  # its client leaves: aborted
        node: dict[str, Any] = {}

        def aborted() -> bool:
            node.update(c.get("/v1/programs/again/nodes/n1").json())
            return bool(node["state"] != "running")

        wait_until(aborted, timeout=20)
        assert node["prompt_tokens"] > 0  # the aborted call's prompt, as its program paid
        assert node["output_tokens"] > 0
        sent = time.time()  # the server's clock: one machine
        retried = c.post("/v1/chat/completions", json={**body, "max_tokens": 8})
        assert retried.status_code == 200, retried.text
        node = c.get("/v1/programs/again/nodes/n1").json()
    assert node["attempts"] == 2
    # every phase drawn is the second call's (the first one's began before ``sent``)
    assert node["timeline"]
    assert all(phase["start"] >= sent for phase in node["timeline"])
    assert [p["phase"] for p in node["timeline"]][-1] == "decode"
    assert node["output_tokens"] == 8  # its latest call's, as its prompt


class RankedEngine(SimLiveRuntime):
    """The simulated runtime, saying it ran the node ``plan`` of ``ranked-*`` programs on
    rank 1 (as SGLang with ``--dp 2`` names the rank of each node it ran)."""

    def node_ranks(self, program_id: str) -> dict[str, int]:
        return {"plan": 1} if program_id.startswith("ranked-") else {}


def test_nodes_carry_the_rank_the_runtime_ran_them_on(tmp_path: Path) -> None:
    engine = RankedEngine(preset("H200-141GB", "llama-3.1-8b", 1), time_scale=0.05)
    with LiveServer(make_config(tmp_path / "ranks.duckdb"), runtime=engine) as live:
        live.wait_ready()
        with live.client() as c:
            _call(c, "ranked-1", "plan")
            tool = {"node_id": "search", "kind": "tool", "parents": ["plan"], "tool": "web"}
            assert c.post("/v1/programs/ranked-1/nodes", json=tool).status_code == 201
            nodes = {n["node_id"]: n for n in c.get("/v1/programs/ranked-1").json()["nodes"]}
            assert nodes["plan"]["dp_rank"] == 1
            assert nodes["search"]["dp_rank"] is None  # a node that ran on no rank
            assert c.get("/v1/programs/ranked-1/nodes/plan").json()["dp_rank"] == 1
            # a program the runtime knows no ranks of: its nodes carry none at all
            _call(c, "plain-1", "plan")
            assert "dp_rank" not in c.get("/v1/programs/plain-1").json()["nodes"][0]
            assert "dp_rank" not in c.get("/v1/programs/plain-1/nodes/plan").json()
