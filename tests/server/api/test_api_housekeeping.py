"""Housekeeping a user relies on without asking: programs that never say they are done end
after ``program_idle_s``, the live metrics are sampled into the store's history table, and
the overview shows how far the online estimates were off."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until


def _call(server: LiveServer, program_id: str) -> None:
    body = {**chat_body("hello there", max_tokens=4), "agentconsole": {"program_id": program_id}}
    with server.client() as c:
        assert c.post("/v1/chat/completions", json=body).status_code == 200


def _state(server: LiveServer, program_id: str) -> str:
    with server.client() as c:
        state: str = c.get(f"/v1/programs/{program_id}").json()["state"]
        return state


def test_an_explicit_program_nobody_finishes_ends_after_the_idle_limit(tmp_path: Path) -> None:
    config = make_config(tmp_path / "idle.duckdb", program_idle_s=0.6)
    with LiveServer(config) as server:
        server.wait_ready()
        _call(server, "never-finished")
        assert _state(server, "never-finished") == "running"
        wait_until(lambda: _state(server, "never-finished") == "finished", timeout=10)


def test_an_idle_finish_teaches_the_door_the_run_up_to_the_last_activity(tmp_path: Path) -> None:
    """The sweeper finishes an idle program long after its work ended: the door's line learns
    the program's run up to its last activity, not the idle limit on top."""
    config = make_config(
        tmp_path / "idle-run.duckdb",
        program_idle_s=1.5,
        program_admission=True,
        admission_budget_tokens=10**9,  # the door counts (and times) programs, holds none
    )
    with LiveServer(config) as server:
        server.wait_ready()
        _call(server, "idle-run")
        wait_until(lambda: _state(server, "idle-run") == "finished", timeout=10)
        service = server.live.service
        tenant = service.controller.programs["idle-run"].tenant
        learned = service.driver.run_times.expected((tenant, f"tenant:{tenant}"))
        assert learned is not None
        assert 0 < learned < 1.5  # one short call, not the 1.5 s idle limit after it


def test_live_metrics_are_sampled_into_the_history_table(tmp_path: Path) -> None:
    config = make_config(tmp_path / "history.duckdb", metrics_snapshot_s=0.2)
    with LiveServer(config) as server:
        server.wait_ready()
        _call(server, "sampled")

        async def names() -> set[str]:
            await asyncio.sleep(0)
            repo = server.live.store.repo
            rows = await asyncio.to_thread(repo.metrics_since, 0.0)
            return {row.name for row in rows}

        wait_until(lambda: "queued_calls" in server.run(names()), timeout=10)
        seen = server.run(names())
        assert {"running_calls", "kv_used_tokens", "prefix_hit_tokens"} <= seen


def test_the_overview_reports_estimator_errors(tmp_path: Path) -> None:
    with LiveServer(make_config(tmp_path / "est.duckdb")) as server:
        server.wait_ready()
        for i in range(3):
            _call(server, f"est-{i}")
        with server.client() as c:
            errors = c.get("/v1/overview").json()["estimator_errors"]
        assert errors["output_tokens"]["count"] >= 3
        assert errors["output_tokens"]["mean_abs_error"] >= 0
