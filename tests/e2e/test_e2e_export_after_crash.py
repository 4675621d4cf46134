"""A store left by ``kill -9``, exported: its rows lag its event log by up to a second, so the
exports refuse it (naming how to replay the events) rather than leave out programs, finishes
and cancels the server had acknowledged; one start and stop of ``serve`` replays them, and the
exports then hold every one (real ``serve`` processes, real HTTP, a real DuckDB file)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from agentconsole.cli import main
from tests.e2e.conftest import start_serve

pytestmark = pytest.mark.e2e
TENANT = {"Authorization": "Bearer sk-dev"}
ARGS = ["--runtime", "sim", "--model", "llama-3.1-8b", "--time-scale", "0.01"]


def _tool_node(http: httpx.Client, program: str) -> None:
    node = {"node_id": "n1", "kind": "tool", "parents": [], "tool": "t"}
    assert http.post(f"/v1/programs/{program}/nodes", json=node).status_code == 201
    start = {"node_id": "n1", "tool": "t"}
    assert http.post(f"/v1/programs/{program}/tool-calls/start", json=start).is_success
    finish = {"node_id": "n1", "outcome": "ok", "latency_s": 0.1}
    assert http.post(f"/v1/programs/{program}/tool-calls/finish", json=finish).is_success


def test_a_crashed_stores_exports_refuse_until_a_start_replays_its_events(tmp_path: Path) -> None:
    db = tmp_path / "crashed.duckdb"
    served = start_serve([*ARGS, "--db", str(db)])
    try:
        with httpx.Client(base_url=served.url, headers=TENANT, timeout=30) as http:
            assert http.post("/v1/programs", json={"program_id": "old"}).status_code == 201
            _tool_node(http, "old")
            time.sleep(2.5)  # the projector writes old's rows (every second)
            for program in ("a", "b"):
                assert http.post("/v1/programs", json={"program_id": program}).status_code == 201
                _tool_node(http, program)
            assert http.post("/v1/programs/a/finish", json={"success": True}).is_success
            assert http.post("/v1/programs/b/cancel").is_success
            assert http.post("/v1/programs/old/cancel").is_success
    finally:
        served.proc.send_signal(signal.SIGKILL)  # before the projector's next write
        served.proc.wait(10)

    trace = tmp_path / "trace.jsonl"
    for argv in (
        ["trace", "export", "--db", str(db), "--out", str(trace)],
        ["export", "--db", str(db), str(tmp_path / "tables")],
    ):
        refused = CliRunner().invoke(main, argv)
        assert refused.exit_code == 1, refused.output
        assert "committed events of its programs are past them" in refused.output
        assert "agentconsole serve --runtime sim" in refused.output
    assert not trace.exists()
    assert not (tmp_path / "tables").exists()

    restarted = start_serve([*ARGS, "--db", str(db)])  # replays the events past the rows
    assert restarted.stop() == 0
    exported = CliRunner().invoke(main, ["trace", "export", "--db", str(db), "--out", str(trace)])
    assert exported.exit_code == 0, exported.output
    programs = {p["id"]: p for p in map(json.loads, trace.read_text().splitlines())}
    assert set(programs) == {"old", "a", "b"}
    assert programs["a"].get("cancel_at_s") is None
    assert programs["b"].get("cancel_at_s") is not None
    assert programs["old"].get("cancel_at_s") is not None
    tables = CliRunner().invoke(main, ["export", "--db", str(db), str(tmp_path / "tables")])
    assert tables.exit_code == 0, tables.output
