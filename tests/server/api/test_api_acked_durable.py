"""A state change the client was told happened is durable when it is told: a program created,
finished or cancelled (tenant and operator routes, an operator key on a tenant's route), a node
declared ahead, and a tool start or end the agent reported are committed to the store before
the answer, so a kill -9 right after it cannot bring the program back running or make it
vanish (the event lane commits fire-and-forget events only every ~250 ms).

Checked in one process by reading, right after each answer and without flushing, what a
start-up would rebuild from the store (``programs_to_restore``), and end to end by killing a
real server (``kill -9``) the moment each answer arrives and starting it again on the file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from agentconsole.scheduler.program import NodeState, Program
from agentconsole.server.live.reopen import programs_to_restore, rebuild, rebuild_created
from tests.server.api.harness import OPERATOR, LiveServer, chat_body, gateway_server
from tests.server.gateway.spawn import ServerProcess

Action = Callable[[httpx.Client, httpx.Client], httpx.Response]


def _restored(server: LiveServer, program_id: str) -> Program | None:
    """``program_id`` as a start-up would rebuild it from what the store has committed now
    (nothing flushed first: what a kill -9 at this moment would leave); None when the store
    would bring back nothing of it."""

    async def read() -> Program | None:
        restorable = await asyncio.to_thread(programs_to_restore, server.live.store.repo)
        for view, tail in restorable:
            pid = view.program.program_id if view else tail[0].event.program_id
            if pid == program_id:
                return rebuild(view, 0.0, tail) if view else rebuild_created(tail, 0.0)
        return None

    return server.run(read())


def _settle(server: LiveServer) -> None:
    """Commit whatever is queued, so the action under test starts the event lane's linger
    afresh: its events then wait ~200 ms unless its answer waits for them."""

    async def flush() -> None:
        await asyncio.wrap_future(server.live.store.writer.flush())

    server.run(flush())


def _report(verb: str, **body: object) -> Action:
    return lambda tenant, _: tenant.post(
        f"/v1/programs/p/tool-calls/{verb}", json={"node_id": "t1", **body}
    )


#: (what is done to program ``p``, running with an LLM node done, and what a start-up must
#: then rebuild: the program's state, and tool node t1's state when the action is a report)
CASES: dict[str, tuple[Action, str, NodeState | None]] = {
    "tenant finish": (
        lambda tenant, _: tenant.post("/v1/programs/p/finish", json={"success": True}),
        "finished",
        None,
    ),
    "operator key finishes on the tenant route": (
        lambda _, operator: operator.post("/v1/programs/p/finish", json={"success": False}),
        "failed",
        None,
    ),
    "tenant cancel": (lambda tenant, _: tenant.post("/v1/programs/p/cancel"), "cancelled", None),
    "operator key cancels on the tenant route": (
        lambda _, operator: operator.post("/v1/programs/p/cancel"),
        "cancelled",
        None,
    ),
    "operator cancel": (
        lambda _, operator: operator.post("/v1/operator/programs/p/cancel"),
        "cancelled",
        None,
    ),
    "tool start report": (_report("start", tool="grep"), "running", NodeState.RUNNING),
}


@pytest.mark.parametrize("case", CASES)
def test_an_acknowledged_program_change_is_committed_before_its_answer(
    tmp_path: Path, case: str
) -> None:
    action, state, tool_state = CASES[case]
    # rows written only at the end: the start-up rebuilds from the event log alone
    with (
        gateway_server(tmp_path / "acked.duckdb", store_sync_s=3600.0) as server,
        server.client() as tenant,
        server.client(OPERATOR) as operator,
    ):
        assert tenant.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        body = chat_body("plan", max_tokens=4, agentconsole={"program_id": "p"})
        assert tenant.post("/v1/chat/completions", json=body).status_code == 200
        _settle(server)
        answer = action(tenant, operator)
        assert answer.status_code == 200, answer.text
        program = _restored(server, "p")
    assert program is not None
    assert program.state.value == state
    if tool_state is not None:
        assert program.nodes["t1"].state is tool_state


def test_a_tool_end_report_is_committed_before_its_answer(tmp_path: Path) -> None:
    with (
        gateway_server(tmp_path / "report.duckdb", store_sync_s=3600.0) as server,
        server.client() as tenant,
    ):
        assert tenant.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        start = {"node_id": "t1", "tool": "grep"}
        assert tenant.post("/v1/programs/p/tool-calls/start", json=start).status_code == 200
        _settle(server)
        end = {"node_id": "t1", "outcome": "ok", "latency_s": 0.5}
        answer = tenant.post("/v1/programs/p/tool-calls/finish", json=end)
        assert answer.status_code == 200, answer.text
        program = _restored(server, "p")
    assert program is not None
    assert program.nodes["t1"].state is NodeState.DONE


@pytest.mark.parametrize("operator_key", [False, True], ids=["tenant", "operator key"])
def test_an_acknowledged_create_is_committed_before_its_answer(
    tmp_path: Path, operator_key: bool
) -> None:
    with gateway_server(tmp_path / "create.duckdb", store_sync_s=3600.0) as server:
        _settle(server)
        with server.client(OPERATOR if operator_key else "sk-a") as c:
            answer = c.post("/v1/programs", json={"program_id": "fresh"})
            assert answer.status_code == 201, answer.text
            program = _restored(server, "fresh")
    assert program is not None
    assert program.state.value == "running"


def test_a_declared_node_is_committed_before_its_answer(tmp_path: Path) -> None:
    with (
        gateway_server(tmp_path / "declared.duckdb", store_sync_s=3600.0) as server,
        server.client() as tenant,
    ):
        assert tenant.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        _settle(server)
        ahead = {"node_id": "t1", "kind": "tool", "tool": "grep", "parents": []}
        answer = tenant.post("/v1/programs/p/nodes", json=ahead)
        assert answer.status_code == 201, answer.text
        program = _restored(server, "p")
    assert program is not None
    tool = program.nodes["t1"].tool
    assert tool is not None
    assert tool.name == "grep"


TENANT = {"Authorization": "Bearer sk-tenant-a"}
OPERATOR_KEY = {"Authorization": "Bearer sk-operator"}


def _killed_after(server: ServerProcess, path: str, body: object = None) -> int:
    """POST ``body`` to ``path``, kill -9 the server the moment its answer arrives; returns
    the answer's status."""
    headers = OPERATOR_KEY if path.startswith("/v1/operator") else TENANT
    answer = httpx.post(server.base_url + path, headers=headers, json=body, timeout=30)
    server.kill()
    return answer.status_code


def _state(server: ServerProcess, program_id: str) -> str:
    answer = httpx.get(f"{server.base_url}/v1/programs/{program_id}", headers=TENANT, timeout=30)
    assert answer.status_code == 200, answer.text
    state: str = answer.json()["state"]
    return state


def test_what_was_acknowledged_survives_a_kill_right_after_the_answer(tmp_path: Path) -> None:
    """Each life of the server ends with kill -9 the moment one answer arrives; the next life
    finds what that answer said: a program created, then finished; another cancelled by an
    operator, which then takes no more calls."""
    db, ledger = tmp_path / "store.duckdb", tmp_path / "ledger.jsonl"
    lives: list[ServerProcess] = []

    def life() -> ServerProcess:
        lives.append(ServerProcess(db, ledger, real=True).start())
        return lives[-1]

    try:
        server = life()
        assert _killed_after(server, "/v1/programs", {"program_id": "made"}) == 201
        server = life()
        assert _state(server, "made") == "running"
        ahead = {"node_id": "next", "kind": "llm", "parents": []}
        assert _killed_after(server, "/v1/programs/made/nodes", ahead) == 201
        server = life()
        # the retry of a declaration whose answer was lost finds the node, as declared
        again = httpx.post(f"{server.base_url}/v1/programs/made/nodes", headers=TENANT, json=ahead)
        assert again.status_code == 201, again.text
        assert again.json()["node_id"] == "next"
        assert _killed_after(server, "/v1/programs/made/finish", {"success": True}) == 200
        server = life()
        assert _state(server, "made") == "finished"
        create = httpx.post(
            f"{server.base_url}/v1/programs", headers=TENANT, json={"program_id": "cut"}
        )
        assert create.status_code == 201
        assert _killed_after(server, "/v1/operator/programs/cut/cancel") == 200
        server = life()
        assert _state(server, "cut") == "cancelled"
        chat = chat_body("go on", max_tokens=4, agentconsole={"program_id": "cut"})
        answer = httpx.post(
            f"{server.base_url}/v1/chat/completions", headers=TENANT, json=chat, timeout=30
        )
        assert answer.status_code == 409, answer.text
    finally:
        for started in lives:
            started.kill()  # a no-op for those already killed
