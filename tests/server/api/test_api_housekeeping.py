"""Housekeeping a user relies on without asking: programs that never say they are done end
after ``program_idle_s``, the live metrics are sampled into the store's history table, and
the overview shows how far the online estimates were off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentconsole.server.store.lane import WriterLane
from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until
from tests.server.api.test_api_programs import WEATHER


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


def test_a_named_program_waiting_on_a_tool_the_model_asked_for_stays_open(
    tmp_path: Path,
) -> None:
    """A tool that runs longer than the idle bound (a test suite, a build, an approval) must
    find its program there when the agent sends the result: it used to be finished, and the
    agent's next call got 409 for good. An inferred program still ends (a later call of its
    chat opens another)."""
    config = make_config(tmp_path / "tools.duckdb", program_idle_s=0.6)
    with LiveServer(config) as server:
        server.wait_ready()
        with server.client() as c:
            body = chat_body("Weather in Paris?", tools=WEATHER, agentconsole={"program_id": "tw"})
            asked = c.post("/v1/chat/completions", json=body).json()
            assert asked["choices"][0]["finish_reason"] == "tool_calls"
            inferred = c.post("/v1/chat/completions", json=chat_body("Weather?", tools=WEATHER))
            inferred_id = inferred.headers["X-Program-Id"]
        wait_until(lambda: _state(server, inferred_id) == "finished", timeout=10)
        assert _state(server, "tw") == "running"
        call = asked["choices"][0]["message"]["tool_calls"][0]
        answer = [
            {"role": "user", "content": "Weather in Paris?"},
            asked["choices"][0]["message"],
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ]
        with server.client() as c:
            body = {**chat_body(), "messages": answer, "agentconsole": {"program_id": "tw"}}
            assert c.post("/v1/chat/completions", json=body).status_code == 200


def test_a_call_the_store_cannot_record_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the store's writer dead of a fatal error, a call's events, node and tokens would
    be lost: it is refused with 503 (``/ready`` already said so), and served again after.
    The writer is shown dead, not made so: a lane that meets a real failure ends its thread
    at the next item it takes (a sample of the metrics under a loaded host, in a run where
    the failure was set on the lane itself), and nothing then brings it back."""
    with LiveServer(make_config(tmp_path / "dead.duckdb")) as server:
        server.wait_ready()
        monkeypatch.setattr(WriterLane, "alive", property(lambda lane: False))
        with server.client() as c:
            refused = c.post("/v1/chat/completions", json=chat_body())
            assert refused.status_code == 503, refused.text
            assert "store" in refused.json()["error"]["message"]
            assert c.get("/ready").status_code == 503
        monkeypatch.undo()
        _call(server, "after")
