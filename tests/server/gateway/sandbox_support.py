"""Helpers of the sandbox tests: a ``python`` sandbox tool, running code through the gateway,
and watching the host's process table for what a sandbox left behind."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from agentconsole.server.gateway import ToolGateway
from agentconsole.server.gateway.sandbox import Sandbox
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, obj, register, tool_body

CODE_PARAMS = obj(("code",), code={"type": "string", "maxLength": 20000})
SETUP_HINT = "the sandbox does not work here: run scripts/setup.sh --test"


async def require_sandbox(sandbox: Sandbox) -> None:
    """Fail (not skip) when bwrap does not work: the setup script installs it."""
    reason = await sandbox.unavailable()
    assert reason is None, f"{SETUP_HINT} ({reason})"


def python_tool(name: str = "python", timeout_s: float = 10.0, **limits: Any) -> dict[str, Any]:
    """A registration body for a sandbox tool running the call's ``code``."""
    executor: dict[str, Any] = {"type": "sandbox", "language": "python"}
    if limits:
        executor["limits"] = limits
    return tool_body(name, executor, parameters=CODE_PARAMS, timeout_s=timeout_s)


async def run_code(
    gateway: ToolGateway,
    port: FakePort,
    code: str,
    *,
    tool: str = "python",
    node: str | None = None,
    timeout_s: float = 10.0,
    **limits: Any,
) -> dict[str, Any]:
    """Register ``tool`` with ``limits`` (replacing it) and run ``code``; the result."""
    await register(gateway, python_tool(tool, timeout_s, **limits))
    done = await call(gateway, port, tool, {"code": code}, node=node or uuid.uuid4().hex)
    assert isinstance(done.result, dict)
    return done.result


def printed(result: dict[str, Any]) -> Any:
    """The JSON the program printed as its last stdout line."""
    assert result["exit_code"] == 0, result
    return json.loads(str(result["stdout"]).strip().splitlines()[-1])


def marker() -> str:
    """A string to put in the command line of processes a test starts in a sandbox."""
    return f"sandbox-marker-{uuid.uuid4().hex}"


def host_processes(mark: str) -> list[int]:
    """Host pids whose command line holds ``mark`` (sandboxed ones included)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if mark.encode() in cmdline:
            found.append(int(entry.name))
    return found


async def wait_processes(mark: str, count: int, timeout: float = 10.0) -> list[int]:
    """Wait until at least ``count`` processes carry ``mark`` (``count`` 0: until none)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = host_processes(mark)
        if (len(pids) >= count if count else not pids) or time.monotonic() > deadline:
            return pids
        await asyncio.sleep(0.05)


def spawner(mark: str) -> str:
    """Code that leaves a child and a double-forked, setsid daemon (both carrying ``mark``)
    and then sleeps: what a wall-clock kill or a cancel must take down, tree and all."""
    return f"""import os, subprocess, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(600)", {mark!r}]
subprocess.Popen(sleeper)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, sleeper)
    os._exit(0)
print("spawned", flush=True)
time.sleep(600)
"""
