"""A transport retry of a tool call in flight (the same program, node and attempt) waits for
the first and replays its result, as docs/API.md says, under the tool's concurrency cap too:
it takes no slot or rate token of its own (before, with ``max_concurrency: 1`` it was
refused 429 while the call it retried ran). Real HTTP, the sim runtime, a DuckDB file."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from tests.server.api.harness import gateway_server, wait_until

SLEEP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"seconds": {"type": "number"}},
}


def test_a_duplicate_of_a_call_in_flight_replays_it_under_a_concurrency_cap(
    tmp_path: Path,
) -> None:
    body = {"program_id": "dup", "node_id": "n1", "arguments": {"seconds": 1.5}}
    with gateway_server(tmp_path / "dup.duckdb") as live:
        with live.client("sk-a") as client:
            tool = {
                "name": "slow",
                "description": "sleeps",
                "parameters": SLEEP,
                "max_concurrency": 1,
                "rate_limit_per_s": 0.01,  # one token: a second admission would be refused
                "executor": {"type": "builtin", "name": "sleep"},
            }
            assert client.post("/v1/tools", json=tool).status_code == 201
        answers: dict[str, httpx.Response] = {}

        def first() -> None:
            with live.client("sk-a") as own:
                answers["first"] = own.post("/v1/tools/slow/call", json=body)

        def running(client: httpx.Client) -> bool:
            found = client.get("/v1/programs/dup")
            nodes: list[dict[str, Any]] = found.json().get("nodes", []) if found.is_success else []
            return any(n["node_id"] == "n1" and n["state"] == "running" for n in nodes)

        thread = threading.Thread(target=first)
        thread.start()
        with live.client("sk-a") as client:
            wait_until(lambda: running(client), timeout=30)
            duplicate = client.post("/v1/tools/slow/call", json=body)
        thread.join(30)
    assert answers["first"].status_code == 200, answers["first"].text
    assert duplicate.status_code == 200, duplicate.text
    assert duplicate.json()["status"] == "replayed"
    assert duplicate.json()["tool_call_id"] == answers["first"].json()["tool_call_id"]


def _register_echo(client: httpx.Client, name: str, *, burst: int) -> None:
    """``name``: the builtin echo, ``burst`` calls and then one per 100 s."""
    echo = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "string"}},
    }
    tool = {
        "name": name,
        "description": "echoes",
        "parameters": echo,
        "rate_limit_per_s": 0.01,
        "burst": burst,
        "executor": {"type": "builtin", "name": "echo"},
    }
    assert client.post("/v1/tools", json=tool).status_code == 201


def test_a_retry_of_a_finished_call_replays_it_past_the_tools_limits(tmp_path: Path) -> None:
    """A retry after the call ended (its agent lost the answer) runs nothing either: it was
    refused 429 once the rate's one token was spent (``Retry-After: 100``) or while another
    call held the one concurrency slot, so the agent could not learn what the effect did."""
    with gateway_server(tmp_path / "retry.duckdb") as live, live.client("sk-a") as client:
        _register_echo(client, "once", burst=1)
        body = {"program_id": "rl", "node_id": "n1", "arguments": {"a": "x"}}
        first = client.post("/v1/tools/once/call", json=body)
        assert first.status_code == 200, first.text
        retry = client.post("/v1/tools/once/call", json=body)
        assert retry.status_code == 200, retry.text
        assert retry.json()["status"] == "replayed"
        assert retry.json()["tool_call_id"] == first.json()["tool_call_id"]
        other = {"program_id": "rl", "node_id": "n2", "arguments": {"a": "y"}}
        refused = client.post("/v1/tools/once/call", json=other)  # a new call: still limited
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limited"
        assert refused.headers["x-should-retry"] == "true"  # it passes once a token refills


def test_a_retry_answered_from_the_store_gives_its_rate_token_back(tmp_path: Path) -> None:
    """A retry of an ended call that finds a token free ran nothing: it took one all the same,
    so the agent's next new call was refused 429 for the retry's sake."""
    with gateway_server(tmp_path / "refund.duckdb") as live, live.client("sk-a") as client:
        _register_echo(client, "twice", burst=2)

        def call(node: str) -> httpx.Response:
            body = {"program_id": "rf", "node_id": node, "arguments": {"a": node}}
            return client.post("/v1/tools/twice/call", json=body)

        assert call("n1").status_code == 200
        for _ in range(3):
            retry = call("n1")
            assert retry.status_code == 200, retry.text
            assert retry.json()["status"] == "replayed"
        second = call("n2")  # the bucket's second token, untouched by the retries
        assert second.status_code == 200, second.text
        assert second.json()["status"] == "committed"
        assert call("n3").status_code == 429  # two new calls spent the burst
