"""Finished programs leave memory after ``limits.retain_finished_s`` and are read from the
store after that: their last rows are written as they leave, however short the retention is
against the rows' write interval (``store_sync_s``)."""

from __future__ import annotations

from pathlib import Path

from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until


def test_a_program_forgotten_before_the_next_row_write_is_stored_finished(tmp_path: Path) -> None:
    # rows are written every 60 s here: the sweep (every 0.5 s) forgets the program long
    # before, and its row used to stay "running" (or be missing)
    config = make_config(tmp_path / "ret.duckdb", retain_finished_s=0.0, store_sync_s=60.0)
    with LiveServer(config) as server:
        server.wait_ready()
        with server.client() as c:
            body = {**chat_body(), "agentconsole": {"program_id": "ret-1"}}
            assert c.post("/v1/chat/completions", json=body).status_code == 200
            assert c.post("/v1/programs/ret-1/finish", json={"success": True}).status_code == 200
            programs = server.live.service.controller.programs
            wait_until(lambda: "ret-1" not in programs, 5)
            # the rows commit after the writer's linger (0.2 s; longer on a loaded host)
            wait_until(lambda: c.get("/v1/programs/ret-1").status_code == 200, 5)
            stored = c.get("/v1/programs/ret-1")
            assert stored.status_code == 200, stored.text
            assert stored.json()["state"] == "finished"
            assert [n["state"] for n in stored.json()["nodes"]] == ["done"]


def test_a_tenants_tokens_used_stays_when_its_programs_leave_memory(tmp_path: Path) -> None:
    """``/v1/tenants``' ``tokens_used`` summed the programs in memory: it fell as ended ones
    left it (5,639 to 2,516, below the tenant's last minute), as at every restart."""
    config = make_config(tmp_path / "tok.duckdb", retain_finished_s=0.0)
    with LiveServer(config) as server:
        server.wait_ready()
        with server.client() as c:
            body = {**chat_body(), "agentconsole": {"program_id": "tok-1"}}
            answer = c.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            usage = answer.json()["usage"]
            paid = usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]
            paid += usage["completion_tokens"]
            assert c.post("/v1/programs/tok-1/finish", json={"success": True}).status_code == 200
            programs = server.live.service.controller.programs
            wait_until(lambda: "tok-1" not in programs, 5)
            (row,) = c.get("/v1/tenants").json()["tenants"]
    assert row["tokens_used"] == paid
    assert row["tokens_used"] <= row["tokens_last_minute"]
