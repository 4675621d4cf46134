"""The client against the real server (simulated runtime, the gateway mounted), over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from agentconsole.client import (
    AgentConsole,
    AsyncAgentConsole,
    IdempotencyMismatchError,
    NotFoundError,
    PermissionDeniedError,
    ToolFailedError,
    ValidationError,
)
from tests.server.gateway.spawn import ServerProcess

pytestmark = pytest.mark.e2e
ECHO = {"type": "builtin", "name": "echo"}
SLEEP = {"type": "builtin", "name": "sleep"}
PARAMS = {
    "type": "object",
    "properties": {"seconds": {"type": "number", "maximum": 5}, "fail": {"type": "boolean"}},
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("client")
    with ServerProcess(tmp / "store.duckdb", tmp / "ledger.jsonl", real=True) as proc:
        yield proc


def test_a_program_with_an_llm_call_and_a_tool_call(server: ServerProcess) -> None:
    with AgentConsole(server.base_url, "sk-tenant-a") as console:
        program = console.create_program(labels={"suite": "client"})
        pid = program.program_id
        assert program.state == "running"
        llm = openai.OpenAI(**console.openai_kwargs(pid, "plan"))
        answer = llm.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "hello"}], max_tokens=4
        )
        assert answer.choices[0].message.content is not None
        console.register_tool("sleep", PARAMS, SLEEP, timeout_s=2.0)
        assert [t.name for t in console.list_tools()] == ["sleep"]
        console.add_node(pid, "wait", kind="tool", parents=["plan"], tool="sleep")
        first = console.call_tool("sleep", pid, "wait", {"seconds": 0.01})
        again = console.call_tool("sleep", pid, "wait", {"seconds": 0.01})
        assert (first.replayed, again.replayed) == (False, True)
        assert again.result == first.result == {"slept": 0.01}
        with pytest.raises(ValidationError):
            console.call_tool("sleep", pid, "wait", {"seconds": 50}, attempt=2)
        with pytest.raises(ToolFailedError) as failed:
            console.call_tool("sleep", pid, "wait", {"seconds": 0, "fail": True}, attempt=3)
        assert failed.value.retryable
        seen = console.get_program(pid)
        assert {n.node_id for n in seen.nodes} >= {"plan", "wait"}
        assert seen.node("wait").parents == ("plan",)
        assert console.get_node(pid, "plan").kind == "llm"
        finished = console.finish_program(pid)
        assert finished.state == "finished"
        page = console.list_programs(label="suite:client")
        assert [p.program_id for p in page.programs] == [pid]


def test_tenants_and_operators(server: ServerProcess) -> None:
    with (
        AgentConsole(server.base_url, "sk-tenant-a") as tenant_a,
        AgentConsole(server.base_url, "sk-tenant-b") as tenant_b,
        AgentConsole(server.base_url, "sk-operator") as operator,
    ):
        pid = tenant_a.create_program().program_id
        with pytest.raises(NotFoundError):
            tenant_b.get_program(pid)
        with pytest.raises(PermissionDeniedError):
            tenant_a.tool_calls()
        tenant_a.tool_started(pid, "browse", "browser")
        report = tenant_a.tool_finished(pid, "browse", "ok", latency_s=0.5)
        assert report["latency_s"] == 0.5
        cancelled = operator.operator_cancel(pid)
        assert cancelled.state == "cancelled"
        actions = operator.audit(limit=50)
        assert any(a.action == "cancel" and pid in a.target for a in actions)
        assert operator.tool_calls(state="needs_reconcile") == []


def test_a_create_sent_again_with_its_idempotency_key_answers_the_same_program(
    server: ServerProcess,
) -> None:
    """The SDK sends ``idempotency_key`` as the ``Idempotency-Key`` header: a create retried
    with it opens nothing new, the same key with another body is refused."""
    with AgentConsole(server.base_url, "sk-tenant-a") as console:
        first = console.create_program(labels={"run": "k1"}, idempotency_key="sdk-key-1")
        again = console.create_program(labels={"run": "k1"}, idempotency_key="sdk-key-1")
        assert again.program_id == first.program_id
        assert console.create_program(labels={"run": "k1"}).program_id != first.program_id
        with pytest.raises(IdempotencyMismatchError):
            console.create_program(labels={"run": "k2"}, idempotency_key="sdk-key-1")


def test_the_async_client_does_the_same(server: ServerProcess) -> None:
    async def flow() -> tuple[str, bool]:
        async with AsyncAgentConsole(server.base_url, "sk-tenant-c") as console:
            program = await console.create_program(deadline_s=60)
            await console.register_tool("echo", {**PARAMS, "properties": {}}, ECHO)
            result = await console.call_tool("echo", program.program_id, "e", {})
            again = await console.call_tool("echo", program.program_id, "e", {})
            cancelled = await console.cancel_program(program.program_id)
            return cancelled.state, again.replayed and not result.replayed

    assert asyncio.run(flow()) == ("cancelled", True)
    assert Path(server.db).exists()
