"""``/v1/operator/whatif``: a window of the running server's traffic (real HTTP, real DuckDB
file, the sim runtime) written as a trace, the bench command for it, and the background run."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.sample_traces import LLMNode, load_trace
from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config, wait_until

CLI = str(Path(sys.executable).with_name("agentconsole"))
#: program id -> (tenant key, LLM calls in a chain)
RECORDED = {"wi-a1": ("sk-a", 2), "wi-a2": ("sk-a", 3), "wi-a3": ("sk-a", 1), "wi-b1": ("sk-b", 2)}
POLICIES = {"fcfs", "sjf", "critical-path", "cp-cache", "stock-sglang"}


def _record(server: LiveServer) -> None:
    """Each program of :data:`RECORDED` as a chain of chat calls."""
    for program_id, (key, calls) in RECORDED.items():
        with server.client(key) as client:
            for i in range(calls):
                headers = {"X-Program-Id": program_id, "X-Node-Id": f"n{i}"}
                if i:
                    headers["X-Parent-Ids"] = f"n{i - 1}"
                answer = client.post(
                    "/v1/chat/completions",
                    json=chat_body(f"step {i}", max_tokens=8),
                    headers=headers,
                )
                assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("whatif")) / "whatif.duckdb"
    with LiveServer(make_config(db, whatif_run_timeout_s=120.0)) as live:
        live.wait_ready()
        _record(live)
        yield live


def _post(server: LiveServer, body: Any, key: str | None = OPERATOR) -> httpx.Response:
    with server.client(key) as client:
        return client.post("/v1/operator/whatif", json=body)


def _audit(server: LiveServer) -> list[tuple[str, str]]:
    with server.client(OPERATOR) as client:
        actions = client.get("/v1/operator/audit", params={"limit": 200}).json()["actions"]
    return [(a["action"], a["result"]) for a in actions]


def _run(server: LiveServer) -> httpx.Response:
    with server.client(OPERATOR) as client:
        return client.get("/v1/operator/whatif/run")


def _finished_run(server: LiveServer, timeout: float = 120) -> dict[str, Any]:
    wait_until(lambda: _run(server).json()["state"] != "running", timeout=timeout, interval=0.2)
    body: dict[str, Any] = _run(server).json()
    return body


def test_no_run_is_a_404_before_the_first(server: LiveServer) -> None:
    answer = _run(server)
    assert answer.status_code == 404
    assert answer.json()["error"]["type"] == "not_found"


def test_the_window_is_written_as_a_trace_with_its_bench_command(server: LiveServer) -> None:
    answer = _post(server, {"since": time.time() - 600})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["programs"] == len(RECORDED)
    path = Path(body["path"])
    assert path.parent == (server.live.config.db_path.parent / "whatif").resolve()
    trace = load_trace(path)
    assert {p.id for p in trace} == set(RECORDED)
    chains = {p.id: [n.id for n in p.nodes] for p in trace}
    assert chains == {pid: [f"n{i}" for i in range(calls)] for pid, (_, calls) in RECORDED.items()}
    assert {p.tenant for p in trace} == {"tenant-a", "tenant-b"}
    # each call's max_tokens, stored with its node, is the trace's declared cap
    assert {n.max_tokens for p in trace for n in p.nodes if isinstance(n, LLMNode)} == {8}
    assert min(p.arrival_s for p in trace) == 0.0  # arrivals from the window's first program
    argv = shlex.split(body["command"])
    assert argv[:4] == ["agentconsole", "bench", "--trace", str(path)]
    assert argv[argv.index("--programs") + 1] == str(len(RECORDED))
    assert argv[argv.index("--policies") + 1] == "all"
    assert argv[argv.index("--gpu") + 1] == server.live.config.gpu
    assert body["run"] is None
    assert ("whatif", "ok") in _audit(server)


def test_a_tenant_window_holds_that_tenant_only(server: LiveServer) -> None:
    body = _post(server, {"tenant": "tenant-b"}).json()
    assert body["programs"] == 1
    assert [p.id for p in load_trace(Path(body["path"]))] == ["wi-b1"]


def test_an_empty_window_answers_zero_programs_and_writes_nothing(server: LiveServer) -> None:
    directory = server.live.config.db_path.parent / "whatif"
    before = sorted(directory.glob("*")) if directory.exists() else []
    for body in ({"since": time.time() + 3600}, {"tenant": "tenant-nobody"}, {"until": 1.0}):
        answer = _post(server, body)
        assert answer.status_code == 200, answer.text
        out = answer.json()
        assert (out["programs"], out["path"], out["command"]) == (0, None, None)
        assert "nothing to replay" in out["message"]
    after = sorted(directory.glob("*")) if directory.exists() else []
    assert after == before


def test_a_tenant_key_is_refused_and_audited(server: LiveServer) -> None:
    answer = _post(server, {}, key="sk-a")
    assert answer.status_code == 403
    assert answer.json()["error"]["type"] == "forbidden"
    assert _post(server, {}, key=None).status_code == 401
    refused = [r for a, r in _audit(server) if a == "whatif"]
    assert any(r.startswith("refused: 403") for r in refused)
    assert any(r.startswith("refused: 401") for r in refused)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"since": -1}, "since"),
        ({"until": 1e11}, "until"),
        ({"tenant": "../etc"}, "tenant"),
        ({"tenant": ""}, "tenant"),
        ({"tenant": 5}, "tenant"),
        ({"path": "/tmp/x.jsonl"}, "path"),
        ({"run": "yes"}, "run"),
        ({"since": 100.0, "until": 50.0}, "until"),
        ({"since": 100, "until": 100}, "until"),
    ],
)
def test_bad_bodies_are_refused_naming_the_field(
    server: LiveServer, body: dict[str, Any], field: str
) -> None:
    answer = _post(server, body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field


def test_a_body_that_is_not_an_object_is_refused(server: LiveServer) -> None:
    answer = _post(server, [1])
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["type"] == "invalid_request"


def test_a_body_that_is_not_json_is_a_400(server: LiveServer) -> None:
    with server.client(OPERATOR) as client:
        answer = client.post(
            "/v1/operator/whatif", content=b"{", headers={"Content-Type": "application/json"}
        )
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_json"


def test_the_printed_command_runs_on_the_written_trace(server: LiveServer, tmp_path: Path) -> None:
    body = _post(server, {}).json()
    argv = shlex.split(body["command"])
    report = tmp_path / "bench.json"
    done = subprocess.run(
        [CLI, *argv[1:], "--jobs", "1", "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(report.read_text())["policies"]
    assert set(runs) >= POLICIES
    for run in runs.values():
        assert run["finished"] + run["cancelled"] + run["failed"] == len(RECORDED)


def test_run_benches_in_the_background_one_at_a_time(server: LiveServer) -> None:
    answer = _post(server, {"run": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["run"]["state"] == "running"
    assert body["run"]["command"] == body["command"]
    second = _post(server, {"run": True})
    assert second.status_code == 409
    assert second.json()["error"]["type"] == "conflict"
    run = _finished_run(server)
    assert run["state"] == "done", run
    assert run["trace"] == body["path"]
    assert set(run["policies"]) >= POLICIES
    for metrics in run["policies"].values():
        assert metrics["finished"] == len(RECORDED)
        assert metrics["e2e_p50_s"] > 0
    assert "E2E P50" in run["table"]
    assert Path(run["report"]).is_file()


def test_a_run_past_its_timeout_is_stopped(server: LiveServer) -> None:
    runner = server.live.whatif.runner
    runner.timeout_s = 0.01
    try:
        assert _post(server, {"run": True}).status_code == 200
        run = _finished_run(server)
    finally:
        runner.timeout_s = 120.0
    assert run["state"] == "timed_out"
    assert "0.01" in run["error"]
    assert run["report"] is None
