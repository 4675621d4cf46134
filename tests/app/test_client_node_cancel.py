"""The SDK's node cancel (``cancel_node``, beside ``cancel_program``) against the real server
over HTTP (simulated runtime, DuckDB store): the branch is cancelled, the program runs on (the
answer's ``program_state`` says so), a second cancel lists nothing, a node under the cancelled
one is refused (409)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentconsole.client import AgentConsole, ConflictError, NodeCancelResult
from tests.server.api.harness import LiveServer, make_config


def test_cancel_node_drops_a_branch_and_the_program_runs_on(tmp_path: Path) -> None:
    with LiveServer(make_config(tmp_path / "sdk.duckdb")) as server:
        server.wait_ready()
        with AgentConsole(server.url, "sk-a") as console:
            pid = console.create_program().program_id
            console.add_node(pid, "root", kind="llm")
            console.add_node(pid, "spec", kind="llm", parents=["root"])
            console.add_node(pid, "spec-2", kind="tool", parents=["spec"], tool="t")
            cancelled = console.cancel_node(pid, "spec")
            again = console.cancel_node(pid, "spec")
            with pytest.raises(ConflictError):
                console.add_node(pid, "under", kind="llm", parents=["spec"])
            program = console.get_program(pid)
    assert isinstance(cancelled, NodeCancelResult)
    assert (cancelled.program_id, cancelled.node_id, cancelled.state) == (pid, "spec", "cancelled")
    assert cancelled.cancelled_nodes == ("spec", "spec-2")
    assert cancelled.program_state == again.program_state == "running"  # the program's, read
    assert cancelled.aborted_calls == cancelled.running_tools == ()
    assert again.cancelled_nodes == ()
    assert program.state == "running"
    assert program.node("spec").state == "cancelled"
    assert program.node("root").state != "cancelled"


def test_a_node_cancel_answer_without_program_state_still_parses() -> None:
    """An older server's answer (no ``program_state``) parses, and a result built without it
    (as before the field existed) is one: the field is optional, ``None`` when not said."""
    answer = {"program_id": "p", "node_id": "n", "state": "cancelled", "cancelled_nodes": ["n"]}
    parsed = NodeCancelResult.parse(answer)
    built = NodeCancelResult(
        program_id="p",
        state="cancelled",
        aborted_calls=(),
        interrupted_tools=(),
        flagged_tools=(),
        node_id="n",
        cancelled_nodes=("n",),
    )
    assert parsed == built
    assert parsed.program_state is None
