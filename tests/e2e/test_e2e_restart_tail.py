"""kill -9 between the store's row writes: a restarted ``serve`` still has everything its
event log committed (rows plus the event tail past the projector's sync mark).

The rows are written once an hour here (``limits.store_sync_s``), so after the kill they hold
nothing of the program; what the restart shows comes from the events alone, and must equal
what the first server showed.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx

from agentconsole.server.store.event_log import EVENTS
from agentconsole.server.store.export import read_only
from tests.e2e.conftest import ServeProcess, start_serve

HEADERS = {"Authorization": "Bearer sk-dev"}
SLOW_ROWS = {"AGENTCONSOLE_LIMITS__STORE_SYNC_S": "3600"}


def _serve(db: Path) -> ServeProcess:
    return start_serve(["--runtime", "sim", "--db", str(db), "--time-scale", "0.05"], SLOW_ROWS)


def _chat(c: httpx.Client, program: str, text: str) -> httpx.Response:
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 8,
        "agentconsole": {"program_id": program},
    }
    answer = c.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    return answer


def _shape(program: dict[str, Any]) -> dict[str, Any]:
    keep = ("node_id", "kind", "state", "parents", "prompt_tokens", "output_tokens")
    return {
        "state": program["state"],
        "tokens_used": program["tokens_used"],
        "tool_calls": program["tool_calls"],
        "nodes_done": program["nodes_done"],
        "attained_service_s": program["attained_service_s"],
        "quotas": program["quotas"],
        "labels": program["labels"],
        "nodes": [{k: n.get(k) for k in keep} for n in program["nodes"]],
    }


def test_sigkill_before_the_rows_are_written_loses_nothing_the_events_hold(
    tmp_path: Path,
) -> None:
    db = tmp_path / "tail.duckdb"
    first = _serve(db)
    try:
        with httpx.Client(base_url=first.url, headers=HEADERS, timeout=30) as c:
            made = c.post(
                "/v1/programs",
                json={
                    "program_id": "late",
                    "quotas": {"tokens": 50_000},
                    "labels": {"workload": "crash"},
                },
            )
            assert made.status_code == 201, made.text
            _chat(c, "late", "plan")
            tool = {"node_id": "search", "tool": "web_search"}
            started = c.post("/v1/programs/late/tool-calls/start", json=tool)
            assert started.status_code < 300, started.text
            done = {"node_id": "search", "outcome": "ok", "latency_s": 0.2}
            finished = c.post("/v1/programs/late/tool-calls/finish", json=done)
            assert finished.status_code < 300, finished.text
            _chat(c, "late", "write")
            before = c.get("/v1/programs/late").json()
        # events commit within the event lane's 200 ms linger (longer while SGLang servers start
        # beside this test on 2 cores); rows wait an hour
        time.sleep(2.0)
    finally:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
    second = _serve(db)
    try:
        with httpx.Client(base_url=second.url, headers=HEADERS, timeout=30) as c:
            after = c.get("/v1/programs/late")
            assert after.status_code == 200, after.text
            assert _shape(after.json()) == _shape(before)
            ids = [n["node_id"] for n in after.json()["nodes"]]
            assert len(ids) == 3
            assert ids[1] == "search"
            # the DAG goes on where it stopped: a new node, parented on the last call
            nxt = _chat(c, "late", "review")
            new_id = nxt.headers["X-Node-Id"]
            assert new_id not in ids
            nodes = c.get("/v1/programs/late").json()["nodes"]
            assert nodes[-1]["node_id"] == new_id
            assert nodes[-1]["parents"] == [ids[-1]]
    finally:
        second.stop()
    with read_only(db) as con:  # each node was added once, across both runs
        added = con.execute(
            f"SELECT node_id, count(*) FROM {EVENTS} WHERE kind = 'node.added'"
            " AND program_id = 'late' GROUP BY node_id ORDER BY node_id"
        ).fetchall()
    assert sorted(added) == sorted((n, 1) for n in [*ids, new_id])


MODELS = """
[runtime]
name = "sim"
time_scale = 0.05

[[models]]
name = "big"
path = "llama-3.1-70b"
tp = 4
tier = 2

[[models]]
name = "small"
path = "llama-3.1-8b"
tier = 1
"""


def test_the_model_each_node_ran_on_survives_a_sigkill(tmp_path: Path) -> None:
    """With several models served, a restart keeps each node's model and the reason: from the
    rows (every candidate's figures) or, for a call the rows missed, from its event."""
    (tmp_path / "serve.toml").write_text(MODELS, encoding="utf-8")
    args = ["--config", str(tmp_path / "serve.toml"), "--db", str(tmp_path / "m.duckdb")]
    first = start_serve(args, SLOW_ROWS)
    try:
        with httpx.Client(base_url=first.url, headers=HEADERS, timeout=30) as c:
            for text in ("plan", "check"):
                body = {
                    "model": "auto",
                    "messages": [{"role": "user", "content": text}],
                    "max_tokens": 4,
                    "agentconsole": {"program_id": "mm"},
                }
                assert c.post("/v1/chat/completions", json=body).status_code == 200
                if text == "plan":  # a listing syncs the rows: the first node is in them
                    assert c.get("/v1/programs").status_code == 200
            before = c.get("/v1/programs/mm").json()["nodes"]
        time.sleep(2.0)  # as above: the events are committed, the rows not
    finally:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
    second = start_serve(args, SLOW_ROWS)
    try:
        with httpx.Client(base_url=second.url, headers=HEADERS, timeout=30) as c:
            after = c.get("/v1/programs/mm").json()["nodes"]
    finally:
        second.stop()
    assert [n["model"] for n in after] == [n["model"] for n in before]
    assert all(n["model"] in ("big", "small") for n in after)
    assert after[0]["model_choice"] == before[0]["model_choice"]  # from its row, whole
    assert after[1]["model_choice"]["reason"] == before[1]["model_choice"]["reason"]
