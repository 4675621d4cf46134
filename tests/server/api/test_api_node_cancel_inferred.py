"""A node cancel in an inferred program (plain chat calls, no program id), over real HTTP
with the simulated runtime and the DuckDB store: the conversation's retry of the cancelled
call and its continuation are served, their parent defaulted past the cancelled node, not
refused for building on it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from tests.server.api.harness import LiveServer, make_config, node_view, wait_until


def _chat(c: httpx.Client, messages: list[dict[str, str]], **extra: Any) -> httpx.Response:
    return c.post("/v1/chat/completions", json={"model": "sim", "messages": messages, **extra})


def test_an_inferred_conversation_goes_on_past_a_cancelled_node(tmp_path: Path) -> None:
    config = make_config(tmp_path / "inferred.duckdb", runtime_extra={"time_scale": 0.5})
    with LiveServer(config) as server:
        server.wait_ready()
        with server.client() as c:
            first = [{"role": "user", "content": "inferred cancel chain 51d0"}]
            one = _chat(c, first, max_tokens=8)
            assert one.status_code == 200, one.text
            pid, root = (
                one.json()["agentconsole"]["program_id"],
                one.json()["agentconsole"]["node_id"],
            )
            assert pid.startswith("inferred-")
            second = [
                *first,
                {"role": "assistant", "content": one.json()["choices"][0]["message"]["content"]},
                {"role": "user", "content": "go on at length"},
            ]
            answers: list[httpx.Response] = []

            def long_call() -> None:
                with server.client() as own:
                    answers.append(_chat(own, second, max_tokens=2000, ignore_eos=True))

            thread = threading.Thread(target=long_call)
            thread.start()

            def running() -> list[str]:
                nodes = c.get(f"/v1/programs/{pid}").json().get("nodes", [])
                return [n["node_id"] for n in nodes if n["state"] == "running"]

            wait_until(lambda: bool(running()))
            (spec,) = running()
            cancelled = c.post(f"/v1/programs/{pid}/nodes/{spec}/cancel")
            thread.join(30)
            # the conversation's next turn (its prompt chain links to the cancelled call),
            # then the client's retry of the cancelled call's own messages
            third = [
                *second,
                {"role": "assistant", "content": "(cut short)"},
                {"role": "user", "content": "shorter, please"},
            ]
            goes_on = _chat(c, third, max_tokens=8)
            assert goes_on.status_code == 200, goes_on.text  # was 409: under the cancelled node
            next_turn = node_view(c, pid, goes_on.json()["agentconsole"]["node_id"])
            retry = _chat(c, second, max_tokens=8)
            assert retry.status_code == 200, retry.text
            retried = node_view(c, pid, retry.json()["agentconsole"]["node_id"])
    assert cancelled.status_code == 200, cancelled.text
    (aborted,) = answers
    assert aborted.status_code == 409, aborted.text
    assert goes_on.json()["agentconsole"]["program_id"] == pid
    assert next_turn["parents"] == [root]  # past the cancelled node, to the call before it
    assert retry.json()["agentconsole"]["program_id"] == pid
    assert spec not in retried["parents"]


def test_a_prompt_past_the_token_quota_never_runs_for_a_node_cancel_to_charge(
    tmp_path: Path,
) -> None:
    """A call whose prompt alone passes the program's token quota used to run (its prompt was
    charged at its end): a node cancel after its prefill then took the program past the quota
    and reported it cancelled. Its uncached prompt now counts from its start: it is refused
    429 before it runs (its node not added, nothing charged) and the program runs on: the
    node, with a prompt that fits, runs as its first attempt."""
    config = make_config(tmp_path / "quota.duckdb", runtime_extra={"time_scale": 0.5})
    with LiveServer(config) as server:
        server.wait_ready()
        with server.client() as c:
            created = c.post("/v1/programs", json={"program_id": "q", "quotas": {"tokens": 500}})
            assert created.status_code == 201, created.text
            body = {
                "model": "sim",
                "messages": [{"role": "user", "content": "go " * 1500}],  # ~1,100 tokens
                "max_tokens": 2000,
                "ignore_eos": True,
                "agentconsole": {"program_id": "q", "node_id": "spec"},
            }
            refused = c.post("/v1/chat/completions", json=body)
            program = c.get("/v1/programs/q").json()
            shorter = {**body, "messages": [{"role": "user", "content": "go"}], "max_tokens": 8}
            retried = c.post("/v1/chat/completions", json=shorter)
            spec = node_view(c, "q", "spec")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["param"] == "quotas.tokens"
    assert (program["state"], program["tokens_used"]) == ("running", 0)
    assert program["nodes"] == []  # refused before its node was added
    assert retried.status_code == 200, retried.text
    assert (spec["state"], spec["attempts"]) == ("done", 1)
