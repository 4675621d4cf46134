"""Escapes from the sandboxed code executor fail closed: network, files, processes, memory, CPU,
output and time, each tried by real code in a real bwrap sandbox through the gateway."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentconsole.server.gateway import ToolGateway
from agentconsole.server.gateway.errors import ProgramNotRunning
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, register
from tests.server.gateway.sandbox_support import (
    marker,
    printed,
    python_tool,
    require_sandbox,
    run_code,
    spawner,
    wait_processes,
)
from tests.server.gateway.spawn import ROOT

pytestmark = [pytest.mark.sandbox, pytest.mark.anyio]


@pytest.fixture
async def sandboxed(gateway: ToolGateway) -> ToolGateway:
    await require_sandbox(gateway.sandbox)
    return gateway


@pytest.fixture
def listeners() -> Iterator[tuple[socket.socket, socket.socket, str]]:
    """A TCP listener on the host's loopback and an abstract unix socket listener."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    tcp.setblocking(False)
    name = f"agentconsole-sandbox-test-{os.getpid()}"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + name)
    unix.listen()
    unix.setblocking(False)
    try:
        yield tcp, unix, name
    finally:
        tcp.close()
        unix.close()


async def test_no_network(
    sandboxed: ToolGateway,
    port: FakePort,
    listeners: tuple[socket.socket, socket.socket, str],
) -> None:
    tcp, unix, name = listeners
    code = f"""import json, socket
out = {{}}
def attempt(key, fn):
    try:
        fn()
        out[key] = "reached"
    except OSError as error:
        out[key] = type(error).__name__
attempt("loopback", lambda: socket.create_connection(("127.0.0.1", {tcp.getsockname()[1]}), 2))
attempt("internet", lambda: socket.create_connection(("1.1.1.1", 53), 2))
attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
attempt("abstract_unix", lambda: socket.socket(socket.AF_UNIX).connect("\\0{name}"))
out["interfaces"] = [n for _, n in socket.if_nameindex()]
print(json.dumps(out))
"""
    seen = printed(await run_code(sandboxed, port, code))
    assert seen.pop("interfaces") == ["lo"]
    assert "reached" not in seen.values(), seen
    for listener in (tcp, unix):  # nothing ever arrived
        with pytest.raises(BlockingIOError):
            listener.accept()


async def test_cannot_read_outside_scratch(
    sandboxed: ToolGateway, port: FakePort, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCONSOLE_SANDBOX_SECRET", "s3cret")
    db = tmp_path / "store.duckdb"  # the gateway's store: open in this process
    assert db.exists()
    targets = [str(db), "/etc/shadow", "/etc/passwd", str(ROOT / "pyproject.toml"), "/root"]
    targets += [f"/proc/{os.getpid()}/environ", str(Path.home() / ".bashrc")]
    code = f"""import json, os
out = {{"read": {{}}}}
for path in {targets!r}:
    try:
        with open(path, "rb") as handle:
            handle.read(1)
        out["read"][path] = "read"
    except OSError as error:
        out["read"][path] = type(error).__name__
out["root"] = sorted(os.listdir("/"))
out["env"] = dict(os.environ)
out["fds"] = sorted(os.listdir("/proc/self/fd"))
out["pids"] = [p for p in os.listdir("/proc") if p.isdigit()]
wanted = ("CapEff", "NoNewPrivs")
out["status"] = [l.split()[0:2] for l in open("/proc/self/status") if l.startswith(wanted)]
print(json.dumps(out))
"""
    seen = printed(await run_code(sandboxed, port, code))
    assert "read" not in seen["read"].values(), seen["read"]
    assert set(seen["root"]) <= {"bin", "dev", "lib", "lib32", "lib64", "libx32", "proc"} | {
        "sandbox",
        "sbin",
        "tmp",
        "usr",
    }
    assert set(seen["env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "PWD"}, seen["env"]
    assert "s3cret" not in json.dumps(seen["env"])
    assert set(seen["fds"]) <= {"0", "1", "2", "3"}  # 3: the directory being listed
    assert len(seen["pids"]) <= 3  # its init, itself (and nothing of the host)
    assert seen["status"] == [["CapEff:", "0000000000000000"], ["NoNewPrivs:", "1"]]


async def test_cannot_write_outside_scratch(
    sandboxed: ToolGateway, port: FakePort, tmp_path: Path
) -> None:
    escaped = tmp_path / "escaped.txt"
    targets = ["/usr/evil", "/evil", "/etc/evil", "/sandbox/main.py", "/dev/evil", "/proc/evil"]
    targets += [str(escaped), str(ROOT / "evil.txt"), "/tmp/kept.txt"]
    code = f"""import json
out = {{}}
for path in {targets!r}:
    try:
        with open(path, "w") as handle:
            handle.write("x")
        out[path] = "written"
    except OSError as error:
        out[path] = type(error).__name__
print(json.dumps(out))
"""
    seen = printed(await run_code(sandboxed, port, code))
    assert seen.pop("/tmp/kept.txt") == "written"
    assert "written" not in seen.values(), seen
    assert not escaped.exists()
    assert not (ROOT / "evil.txt").exists()
    again = "import os, json; print(json.dumps(os.listdir('/tmp')))"
    assert printed(await run_code(sandboxed, port, again)) == []  # scratch is per call


async def test_scratch_is_bounded(sandboxed: ToolGateway, port: FakePort) -> None:
    code = """import errno, json
one = None
try:
    with open("/tmp/big", "wb") as handle:
        handle.write(b"x" * (6 << 20))
except OSError as error:
    one = errno.errorcode[error.errno]
total = 0
try:
    for i in range(100):
        with open(f"/tmp/part{i}", "wb") as handle:
            handle.write(b"x" * (1 << 20))
        total += 1
except OSError as error:
    pass
print(json.dumps({"one": one, "total_mb": total}))
"""
    seen = printed(await run_code(sandboxed, port, code, scratch_mb=4))
    assert seen["one"] == "EFBIG"  # RLIMIT_FSIZE (Python ignores SIGXFSZ)
    assert seen["total_mb"] <= 4  # the tmpfs is full


async def test_fork_bomb_hits_the_process_limit(sandboxed: ToolGateway, port: FakePort) -> None:
    mark = marker()
    code = f"""import os, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(60)", {mark!r}]
forked = 0
try:
    while True:
        if os.fork() == 0:
            os.execv(sys.executable, sleeper)
        forked += 1
except OSError as error:
    print(forked, type(error).__name__)
"""
    result = await run_code(sandboxed, port, code, processes=8)
    forked, error = str(result["stdout"]).split()
    assert error == "BlockingIOError"
    assert int(forked) <= 6  # 8 with the init and the program
    assert result["duration_s"] < 10  # its sleeping children die with it
    assert await wait_processes(mark, 0) == []
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = await run_code(sandboxed, port, bomb, processes=8, wall_s=2, cpu_s=5)
    assert result["killed"] == "timeout"
    assert result["exit_code"] is None


async def test_runaway_memory(sandboxed: ToolGateway, port: FakePort) -> None:
    code = """blocks = []
try:
    while True:
        blocks.append(bytearray(8 << 20))
except MemoryError:
    print(len(blocks))
raise MemoryError("again")
"""
    result = await run_code(sandboxed, port, code, memory_mb=128)
    assert 1 <= int(result["stdout"]) * 8 < 128
    assert result["exit_code"] == 1
    assert "MemoryError: again" in result["stderr"]


async def test_runaway_cpu(sandboxed: ToolGateway, port: FakePort) -> None:
    spin = "while True:\n    pass\n"
    result = await run_code(sandboxed, port, spin, timeout_s=30, cpu_s=1, wall_s=25)
    assert result["exit_code"] == 152
    assert result["signal"] == "SIGXCPU"
    assert result["killed"] is None
    assert result["duration_s"] < 25


async def test_runaway_output_is_truncated_and_reported(
    sandboxed: ToolGateway, port: FakePort
) -> None:
    code = "import sys\nwhile True:\n    print('x' * 100)\n    print('e' * 10, file=sys.stderr)\n"
    result = await run_code(sandboxed, port, code, output_bytes=4096, wall_s=8)
    assert result["truncated"] is True
    assert result["killed"] == "output_limit"
    assert len(result["stdout"]) + len(result["stderr"]) == 4096
    assert result["exit_code"] is None
    assert result["duration_s"] < 8


async def test_timeout_kills_the_whole_tree(sandboxed: ToolGateway, port: FakePort) -> None:
    mark = marker()
    running = asyncio.create_task(run_code(sandboxed, port, spawner(mark), wall_s=6))
    assert len(await wait_processes(mark, 2)) == 2  # the child and the daemon are up
    result = await running
    assert result["killed"] == "timeout"
    assert result["exit_code"] is None
    assert result["stdout"] == "spawned\n"
    assert await wait_processes(mark, 0) == []


async def test_cancel_kills_the_whole_tree(sandboxed: ToolGateway, port: FakePort) -> None:
    mark = marker()
    await register(sandboxed, python_tool("python", wall_s=9))
    running = asyncio.create_task(call(sandboxed, port, "python", {"code": spawner(mark)}))
    assert len(await wait_processes(mark, 2)) == 2
    report = sandboxed.cancel_program("p1")
    assert [t.tool for t in report.interrupted] == ["python"]
    with pytest.raises(ProgramNotRunning):
        await running
    assert await wait_processes(mark, 0) == []


async def test_a_killed_server_takes_its_sandboxes_along(
    sandboxed: ToolGateway, tmp_path: Path
) -> None:
    mark = marker()
    server = tmp_path / "server.py"  # a file: the marker must not be in this one's command line
    server.write_text(f"""import asyncio
from agentconsole.server.gateway.sandbox import Sandbox
from agentconsole.server.gateway.sandbox_spec import SandboxLimits
limits = SandboxLimits(wall_s=60)
asyncio.run(Sandbox().run("python", {spawner(mark)!r}, b"", limits, tenant="t"))
""")
    child = subprocess.Popen([sys.executable, str(server)], cwd=ROOT)
    try:
        assert len(await wait_processes(mark, 2)) == 2
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert await wait_processes(mark, 0) == []  # --die-with-parent, then the pid namespace
