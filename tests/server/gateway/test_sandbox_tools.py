"""The ``sandbox`` executor as a tool: registration rules, the refusal where the sandbox cannot
run, results, replay, the store round trip, HTTP and the demo agent."""

from __future__ import annotations

import asyncio
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import TestClient

from agentconsole.replay.demo import run_python_demo
from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.errors import GatewayError, InvalidTool, ToolFailed
from agentconsole.server.gateway.sandbox import Sandbox, SandboxUnavailable
from agentconsole.server.gateway.sandbox_spec import SandboxConfig
from agentconsole.server.store import Store
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, obj, register, tool_body
from tests.server.gateway.mini_server import OPERATOR, TENANT_A, in_process
from tests.server.gateway.sandbox_support import CODE_PARAMS, python_tool, require_sandbox
from tests.server.gateway.spawn import ServerProcess

pytestmark = [pytest.mark.sandbox, pytest.mark.anyio]


@pytest.fixture
def fake_bwrap() -> Iterator[Path]:
    """A directory the sandbox's unprivileged identity may enter, for stand-in ``bwrap``s."""
    folder = Path(tempfile.mkdtemp(prefix="fake-bwrap-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for item in folder.iterdir():
            item.unlink()
        folder.rmdir()


def _script(folder: Path, body: str) -> str:
    path = folder / "bwrap"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH | 0o444)
    return str(path)


async def _refused(store: Store, sandbox: Sandbox) -> GatewayError:
    gateway = ToolGateway(store, GatewayConfig(), sandbox=sandbox)
    await gateway.start()
    try:
        with pytest.raises(SandboxUnavailable) as caught:
            await register(gateway, python_tool())
        assert gateway.tools("t1", operator=False) == []
        assert gateway.audit.rejections == {"sandbox_unavailable": 1}
        return caught.value
    finally:
        await gateway.close()


async def test_registration_is_refused_without_bwrap(store: Store) -> None:
    error = await _refused(store, Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap")))
    assert error.status == 422
    assert error.field == "executor/type"
    assert "bubblewrap" in error.message
    assert "not installed" in error.message


async def test_registration_is_refused_without_namespaces(store: Store, fake_bwrap: Path) -> None:
    denied = "bwrap: No permissions to creating new namespace, likely because the kernel does"
    fake = _script(fake_bwrap, f"echo '{denied}' >&2\nexit 1\n")
    error = await _refused(store, Sandbox(SandboxConfig(bwrap=fake)))
    assert "cannot create the sandbox here" in error.message
    assert denied[:40] in error.message


async def test_registration_is_refused_when_the_sandbox_leaks(
    store: Store, fake_bwrap: Path
) -> None:
    # a bwrap that works but binds the host's /etc: the probe sees it and refuses
    fake = _script(fake_bwrap, 'exec /usr/bin/bwrap --ro-bind /etc /etc "$@"\n')
    error = await _refused(store, Sandbox(SandboxConfig(bwrap=fake)))
    assert "host directories" in error.message
    assert "etc" in error.message


@pytest.mark.parametrize(
    ("executor", "fields", "field"),
    [
        ({"language": "ruby"}, {}, "executor/language"),
        ({"language": "python", "image": "x"}, {}, "executor"),
        ({"language": "python"}, {"parameters": obj(text={"type": "string"})}, "parameters"),
        ({"language": "python", "script": ""}, {}, "executor/script"),
        ({"language": "python", "script": "print(1)\u202e"}, {}, "executor/script"),
        ({"language": "python", "limits": {"memory_mb": 1 << 20}}, {}, "executor/limits/memory_mb"),
        ({"language": "python", "limits": {"wall_s": 9.5}}, {}, "executor/limits/wall_s"),
        ({"language": "python", "limits": {"cpu_s": 1.5}}, {}, "executor/limits/cpu_s"),
        ({"language": "python", "limits": {"disk": 1}}, {}, "executor/limits/disk"),
        ({"language": "python"}, {"side_effect": True}, "side_effect"),
    ],
)
async def test_registration_rules(
    gateway: ToolGateway, executor: dict[str, Any], fields: dict[str, Any], field: str
) -> None:
    body = tool_body("py", {"type": "sandbox", **executor}, parameters=CODE_PARAMS, timeout_s=10)
    body.update(fields)
    with pytest.raises(InvalidTool) as caught:
        await register(gateway, body)
    assert caught.value.field == field


async def test_code_runs_and_replays(gateway: ToolGateway, port: FakePort) -> None:
    await require_sandbox(gateway.sandbox)
    defined = await register(gateway, python_tool())
    assert defined.executor.to_json()["limits"] == {
        "cpu_s": 10,
        "memory_mb": 512,
        "processes": 16,
        "output_bytes": 65536,
        "scratch_mb": 16,
        "wall_s": 9.0,
    }
    code = "import json, sys\nprint(sum(range(10)))\n"
    first = await call(gateway, port, "python", {"code": code})
    again = await call(gateway, port, "python", {"code": code})
    assert first.status == "committed"
    assert again.status == "replayed"
    assert again.result == first.result
    assert isinstance(first.result, dict)
    assert first.result["stdout"] == "45\n"
    assert first.result["exit_code"] == 0
    assert first.result["stderr"] == ""
    assert first.result["truncated"] is False
    assert gateway.runner.executions == 1
    failing = await call(gateway, port, "python", {"code": "raise ValueError('boom')"}, node="n2")
    assert isinstance(failing.result, dict)
    assert failing.result["exit_code"] == 1
    assert "ValueError: boom" in str(failing.result["stderr"])  # a result the agent reads


async def test_fixed_script_reads_arguments_on_stdin(gateway: ToolGateway, port: FakePort) -> None:
    await require_sandbox(gateway.sandbox)
    script = "import json, sys\nargs = json.load(sys.stdin)\nprint(args['a'] * args['b'])\n"
    params = obj(("a", "b"), a={"type": "integer"}, b={"type": "integer"})
    executor = {"type": "sandbox", "language": "python", "script": script}
    await register(gateway, tool_body("multiply", executor, parameters=params))
    done = await call(gateway, port, "multiply", {"a": 6, "b": 7})
    assert isinstance(done.result, dict)
    assert done.result["stdout"] == "42\n"


async def test_a_stored_tool_survives_a_restart_and_never_runs_unsandboxed(
    gateway: ToolGateway, store: Store, port: FakePort
) -> None:
    defined = await register(gateway, python_tool(cpu_s=3, memory_mb=256))
    broken = Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap"))
    restarted = ToolGateway(store, GatewayConfig(), sandbox=broken)
    await restarted.start()
    try:
        loaded = restarted.registry.resolve("t1", "python")
        assert loaded is not None
        assert loaded.definition.executor == defined.executor
        with pytest.raises(ToolFailed) as caught:
            await call(restarted, port, "python", {"code": "print('ran')"})
        assert "sandbox unavailable" in caught.value.message
        assert caught.value.extra["retryable"] is True
    finally:
        await restarted.close()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient[Litestar], ToolGateway]]:
    with in_process(tmp_path / "s.duckdb", GatewayConfig()) as (http, gateway, _):
        yield http, gateway


def test_over_http_like_any_tool(client: tuple[TestClient[Litestar], ToolGateway]) -> None:
    http, gateway = client
    created = http.post("/v1/tools", json=python_tool(), headers=TENANT_A)
    assert created.status_code == 201, created.text
    assert created.json()["executor"]["type"] == "sandbox"
    body = {"program_id": "p", "node_id": "n", "arguments": {"code": "print(6 * 7)"}}
    first = http.post("/v1/tools/python/call", json=body, headers=TENANT_A)
    assert first.status_code == 200, first.text
    second = http.post("/v1/tools/python/call", json=body, headers=TENANT_A).json()
    assert first.json()["result"]["stdout"] == "42\n"
    assert (first.json()["status"], second["status"]) == ("committed", "replayed")
    other = {**body, "arguments": {"code": "print(1)"}}
    mismatch = http.post("/v1/tools/python/call", json=other, headers=TENANT_A)
    assert mismatch.status_code == 422
    assert mismatch.json()["error"]["type"] == "idempotency_mismatch"
    gateway.sandbox = Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap"))
    refused = http.post("/v1/tools", json=python_tool("python2"), headers=TENANT_A)
    assert refused.status_code == 422
    assert refused.json()["error"]["type"] == "sandbox_unavailable"
    gateway.store.writer.flush().result(10)
    rows = gateway.store.repo.audit_log(limit=100)
    actions = {
        (r.action.action, r.action.target, r.action.args.get("type", r.action.result)) for r in rows
    }
    assert ("tool.register", "tool:python", "ok") in actions
    assert ("tool.register", "tool", "sandbox_unavailable") in actions
    assert ("tool.call", "tool:python", "idempotency_mismatch") in actions
    refusals = [r.action.result for r in rows if r.action.result != "ok"]
    assert refusals
    assert all(result.startswith("refused: 422 ") for result in refusals)


@pytest.mark.e2e
def test_the_demo_agent_runs_python_in_the_sandbox(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "store.duckdb", tmp_path / "ledger.jsonl", real=True) as server:
        output = asyncio.run(run_python_demo(server.base_url, "sk-tenant-a", program_id="py-1"))
        assert output is not None
        assert "primes below 60: [2, 3, 5, 7" in output
        calls = httpx.get(f"{server.base_url}/v1/operator/tool-calls", headers=OPERATOR).json()
        assert [(c["program_id"], c["tool"]) for c in calls["tool_calls"]] == [
            ("py-1", "demo_python")
        ]
        program = httpx.get(f"{server.base_url}/v1/programs/py-1", headers=TENANT_A).json()
        assert program["state"] == "finished"


def test_the_sandbox_runs_on_uvloop_the_loop_serve_runs() -> None:
    # uvicorn runs serve on uvloop, whose subprocesses take no user=/group= and do not close
    # inherited descriptors: the sandbox works there, and a descriptor some library left
    # inheritable does not reach the process
    import os

    import uvloop

    from agentconsole.server.gateway.sandbox_process import run

    leaked = os.open("/dev/null", os.O_RDONLY)
    os.set_inheritable(leaked, True)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            assert runner.run(Sandbox().unavailable()) is None
            done = runner.run(
                run(["/bin/ls", "/proc/self/fd"], stdin=b"", output_bytes=4096, wall_s=10)
            )
    finally:
        os.close(leaked)
    assert done.returncode == 0
    assert set(done.stdout.decode().split()) <= {"0", "1", "2", "3"}  # 3: the listed directory
