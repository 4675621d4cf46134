"""A clean stop answers the calls in flight: a non-streamed call gets the JSON 503 every
refusal has, a stream its error frame and ``[DONE]`` (before, uvicorn's graceful timeout
cancelled the handlers: a bare 500, a stream cut with no end). A restart shows both programs
still running, each call cancelled (it can run again), the tokens it produced counted. With
the store in a database process of its own (``store.own_process``), that process ends with
``serve`` and the restart reads what it wrote."""

from __future__ import annotations

import json
import signal
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
OPERATOR = {"Authorization": "Bearer sk-operator"}


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


def _content(frame: str) -> str:
    """The text a chat stream's frame delivers ("" for the role frame, an error, [DONE])."""
    try:
        choices = json.loads(frame).get("choices")
    except ValueError:
        return ""
    return str(choices[0]["delta"].get("content") or "") if choices else ""


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

    first_token = threading.Event()

    def streamed() -> None:
        with httpx.Client(base_url=served.url, headers=HEADERS, timeout=60) as c:
            body = _long_call("s", stream=True)
            with c.stream("POST", "/v1/chat/completions", json=body) as answer:
                lines = []
                for line in answer.iter_lines():
                    lines.append(line)
                    if _content(line.removeprefix("data: ")):
                        first_token.set()  # a token: the role frame's content is empty
                got["stream"] = (answer.status_code, lines)

    threads = [threading.Thread(target=plain), threading.Thread(target=streamed)]
    try:
        for thread in threads:
            thread.start()
        with httpx.Client(base_url=served.url, headers=HEADERS, timeout=10) as c:
            deadline = time.monotonic() + 30
            # stop once the stream has had tokens: a call admitted but not yet prefilled
            # has cost nothing, and the restart is to show what it did cost
            while not (_running(c, "p") and first_token.is_set()):
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
            # every token the stream delivered is counted (with the prompt's)
            delivered = sum(1 for frame in frames[:-2] if _content(frame))
            assert delivered > 0
            assert c.get("/v1/programs/s").json()["tokens_used"] > delivered
    finally:
        again.stop()


def _sleep_tool(name: str, *, side_effect: bool) -> dict[str, Any]:
    return {
        "name": name,
        "description": "waits",
        "parameters": {
            "type": "object",
            "properties": {"seconds": {"type": "number"}},
            "additionalProperties": False,
        },
        "side_effect": side_effect,
        "idempotent": not side_effect,
        "timeout_s": 60,
        "executor": {"type": "builtin", "name": "sleep"},
    }


def _tool_call(node_id: str, seconds: float) -> dict[str, Any]:
    return {"program_id": "t", "node_id": node_id, "arguments": {"seconds": seconds}}


def test_a_clean_stop_answers_the_tool_calls_in_flight(tmp_path: Path) -> None:
    """Ctrl-C during gateway tool calls: each caller gets the JSON 503 (retryable) within
    about a second, not uvicorn's bare 500 after its 5 s grace. The read-only tool is
    interrupted and its intent left retryable (the retry runs it again); the side effect runs
    on to its commit as the server stops (the retry replays it: it never runs twice)."""
    db = tmp_path / "tools.duckdb"
    served = start_serve(["--runtime", "sim", "--db", str(db)])
    got: dict[str, httpx.Response] = {}

    def call(tool: str, node_id: str, seconds: float) -> None:
        with httpx.Client(base_url=served.url, headers=HEADERS, timeout=60) as c:
            got[tool] = c.post(f"/v1/tools/{tool}/call", json=_tool_call(node_id, seconds))

    threads = [
        threading.Thread(target=call, args=("wait", "r", 30)),
        threading.Thread(target=call, args=("effect", "w", 3)),
    ]
    try:
        with httpx.Client(base_url=served.url, headers=HEADERS, timeout=10) as c:
            for body in (
                _sleep_tool("wait", side_effect=False),
                _sleep_tool("effect", side_effect=True),
            ):
                assert c.post("/v1/tools", json=body).status_code == 201
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 30
            while not all(_running_tool(c, node) for node in ("r", "w")):
                assert time.monotonic() < deadline, "the tools never started"
                time.sleep(0.05)
        stopped_at = time.monotonic()
        served.proc.send_signal(signal.SIGINT)
        for thread in threads:
            thread.join(30)
        answered_in = time.monotonic() - stopped_at
        # no second SIGINT (uvicorn's forced quit): the side effect runs on to its commit
        assert served.proc.wait(30) == 0
    finally:
        served.stop()
    assert answered_in < 3, answered_in
    for tool in ("wait", "effect"):
        answer = got[tool]
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["type"] == "unavailable"
        assert "shutting down" in error["message"]
        assert error["retryable"] is True
        assert answer.headers["retry-after"]
    again = start_serve(["--runtime", "sim", "--db", str(db)])
    try:
        with httpx.Client(base_url=again.url, headers=HEADERS, timeout=30) as c:
            # the interrupted read-only call may run again; the side effect that committed
            # while the server stopped is replayed, not run a second time
            listed = c.get("/v1/operator/tool-calls", headers=OPERATOR).json()["tool_calls"]
            states = {call["node_id"]: call["state"] for call in listed}
            assert states == {"r": "retryable", "w": "committed"}
            replayed = c.post("/v1/tools/effect/call", json=_tool_call("w", 3))
            assert replayed.status_code == 200, replayed.text
            assert replayed.json()["status"] == "replayed"
    finally:
        again.stop()


def _running_tool(client: httpx.Client, node_id: str) -> bool:
    found = client.get("/v1/programs/t")
    return found.status_code == 200 and any(
        n["node_id"] == node_id and n["state"] == "running" for n in found.json()["nodes"]
    )
