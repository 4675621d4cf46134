"""A clean stop answers the calls in flight: a non-streamed call gets the JSON 503 every
refusal has, a stream its error frame and ``[DONE]`` (before, uvicorn's graceful timeout
cancelled the handlers: a bare 500, a stream cut with no end). A restart shows both programs
still running, each call cancelled (it can run again), the tokens it produced counted. With
the store in a database process of its own (``store.own_process``), that process ends with
``serve`` and the restart reads what it wrote."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.server.store.remote import DBPROCESS_MODULE
from tests.e2e.conftest import start_serve

pytestmark = pytest.mark.e2e
HEADERS = {"Authorization": "Bearer sk-dev"}


def _long_call(program_id: str, *, stream: bool) -> dict[str, Any]:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": f"write at length {program_id}"}],
        "max_tokens": 30_000,  # minutes at the simulated speed: still running at the stop
        "ignore_eos": True,
        "stream": stream,
        "agentconsole": {"program_id": program_id},
    }


def _running(client: httpx.Client, program_id: str) -> bool:
    found = client.get(f"/v1/programs/{program_id}")
    return found.status_code == 200 and any(n["state"] == "running" for n in found.json()["nodes"])


def _database_processes(parent: int) -> list[int]:
    """PIDs of the store database processes (``dbprocess.py``) whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if (
            int(stat.rsplit(")", 1)[1].split()[1]) == parent
            and DBPROCESS_MODULE.encode() in cmdline
        ):
            found.append(int(entry.name))
    return found


def _exited(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("own_process", [False, True], ids=["in-process", "db-process"])
def test_a_clean_stop_answers_the_calls_in_flight(tmp_path: Path, own_process: bool) -> None:
    db = tmp_path / "stop.duckdb"
    env = {"AGENTCONSOLE_STORE__OWN_PROCESS": str(own_process).lower()}
    served = start_serve(["--runtime", "sim", "--db", str(db)], env)
    database = _database_processes(served.proc.pid)
    assert len(database) == int(own_process)
    got: dict[str, Any] = {}

    def plain() -> None:
        with httpx.Client(base_url=served.url, headers=HEADERS, timeout=60) as c:
            got["plain"] = c.post("/v1/chat/completions", json=_long_call("p", stream=False))

    def streamed() -> None:
        with httpx.Client(base_url=served.url, headers=HEADERS, timeout=60) as c:
            body = _long_call("s", stream=True)
            with c.stream("POST", "/v1/chat/completions", json=body) as answer:
                got["stream"] = (answer.status_code, list(answer.iter_lines()))

    threads = [threading.Thread(target=plain), threading.Thread(target=streamed)]
    try:
        for thread in threads:
            thread.start()
        with httpx.Client(base_url=served.url, headers=HEADERS, timeout=10) as c:
            deadline = time.monotonic() + 30
            while not (_running(c, "p") and _running(c, "s")):
                assert time.monotonic() < deadline, "the calls never started"
                time.sleep(0.05)
        served.stop()
        for thread in threads:
            thread.join(30)
    finally:
        served.stop()
    assert all(_exited(pid) for pid in database)
    refused = got["plain"]
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["type"] == "unavailable"
    assert "shutting down" in refused.json()["error"]["message"]
    status, lines = got["stream"]
    frames = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert status == 200
    assert frames[-1] == "[DONE]"
    assert json.loads(frames[-2])["error"]["type"] == "unavailable"
    again = start_serve(["--runtime", "sim", "--db", str(db)], env)
    try:
        with httpx.Client(base_url=again.url, headers=HEADERS, timeout=10) as c:
            for program_id in ("p", "s"):
                program = c.get(f"/v1/programs/{program_id}").json()
                # the call is cancelled (it can run again); the program is not
                assert [n["state"] for n in program["nodes"]] == ["cancelled"]
                assert program["state"] == "running"
            assert c.get("/v1/programs/s").json()["tokens_used"] > 0
    finally:
        again.stop()
