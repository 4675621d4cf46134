"""The four program quotas: tokens (429), tool calls (429), branches (429), wall time (403)."""

from __future__ import annotations

import threading
import time

from tests.server.api.harness import LiveServer, chat_body, wait_until


def _open(client: object, pid: str, **quotas: float) -> None:
    response = client.post("/v1/programs", json={"program_id": pid, "quotas": quotas})  # type: ignore[attr-defined]
    assert response.status_code == 201, response.text


def test_token_quota_stops_the_program_with_429(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-tokens", tokens=150)
        body = chat_body("x" * 200, max_tokens=64, ignore_eos=True)
        first = c.post(
            "/v1/chat/completions", json={**body, "agentconsole": {"program_id": "q-tokens"}}
        )
        assert first.status_code == 200
        second = c.post(
            "/v1/chat/completions", json={**body, "agentconsole": {"program_id": "q-tokens"}}
        )
        assert second.status_code == 429, second.text
        assert second.json()["error"]["type"] == "quota_exceeded"
        assert "tokens" in second.json()["error"]["message"]
        wait_until(lambda: c.get("/v1/programs/q-tokens").json()["state"] == "cancelled")
        program = c.get("/v1/programs/q-tokens").json()
        # overshoot is bounded by one streamed delta of the call that crossed the limit
        assert program["tokens_used"] <= 150 + 64
        again = c.post(
            "/v1/chat/completions", json={**body, "agentconsole": {"program_id": "q-tokens"}}
        )
        assert again.status_code == 429


def test_token_quota_mid_stream_ends_with_an_error_event(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-stream", tokens=40)
        body = chat_body("short", max_tokens=500, ignore_eos=True, stream=True)
        body["agentconsole"] = {"program_id": "q-stream"}
        text = c.post("/v1/chat/completions", json=body).text
    assert '"quota_exceeded"' in text
    assert text.rstrip().endswith("data: [DONE]")


def test_tool_call_quota_is_429(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-tools", tool_calls=1)
        node = {"node_id": "t1", "kind": "tool", "tool": "search"}
        assert c.post("/v1/programs/q-tools/nodes", json=node).status_code == 201
        node["node_id"] = "t2"
        refused = c.post("/v1/programs/q-tools/nodes", json=node)
        assert refused.status_code == 429
        assert refused.json()["error"]["field"] == "quotas.tool_calls"
        # what the program shows (1 of 1), not what the refused node would have made it
        assert refused.json()["error"]["message"] == (
            "program 'q-tools' exceeded its tool_calls quota (1 of 1): this node would make it"
            " 2; nothing was added"
        )
        assert c.get("/v1/programs/q-tools").json()["tool_calls"] == 1


def test_branch_quota_is_429(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-branch", branches=2)
        c.post("/v1/programs/q-branch/nodes", json={"node_id": "root", "kind": "llm"})
        for child in ("a", "b"):
            node = {"node_id": child, "kind": "llm", "parents": ["root"]}
            c.post("/v1/programs/q-branch/nodes", json=node)
        node = {"node_id": "c", "kind": "llm", "parents": ["root"]}
        refused = c.post("/v1/programs/q-branch/nodes", json=node)
    assert refused.status_code == 429
    assert refused.json()["error"]["field"] == "quotas.branches"


def test_wall_time_quota_cancels_within_a_second_and_403s(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-wall", wall_time_s=0.3)
        wait_until(lambda: c.get("/v1/programs/q-wall").json()["state"] == "cancelled", 3)
        # by the server's own clock: the client's polling on a loaded host is no part of it
        program = c.get("/v1/programs/q-wall").json()
        assert program["finished_at"] - program["created_at"] < 0.3 + 1.0
        refused = c.post(
            "/v1/chat/completions", json=chat_body(agentconsole={"program_id": "q-wall"})
        )
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "quota_exceeded"


def _stream_tokens(server: LiveServer, pid: str, max_tokens: int, stop_after: int) -> int:
    """Stream one call of ``pid`` and hang up after ``stop_after`` content chunks (or at the
    end); returns the chunks with content received."""
    body = chat_body("go", max_tokens=max_tokens, ignore_eos=True, stream=True)
    body["agentconsole"] = {"program_id": pid}
    got = 0
    with server.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                got += 1
                if got >= stop_after:
                    break
    return got


def test_parallel_streams_cut_short_cannot_beat_the_token_quota(server: LiveServer) -> None:
    """Six streams of 250 tokens cut after ~200 used to deliver ~1,200 tokens under a 300-token
    quota: the tokens all streams of a program received count together, and what a stream
    delivered before its client left is charged."""
    with server.client() as c:
        _open(c, "q-bypass", tokens=300)
    results: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(_stream_tokens(server, "q-bypass", 250, 200))
        )
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # each stream overshoots by at most one delta once the program's total passed the quota
    assert sum(results) <= 300 + 6
    with server.client() as c:
        again = c.post(
            "/v1/chat/completions",
            json={**chat_body("more", max_tokens=8), "agentconsole": {"program_id": "q-bypass"}},
        )
        assert again.status_code == 429, again.text
        wait_until(lambda: c.get("/v1/programs/q-bypass").json()["state"] == "cancelled")
        assert c.get("/v1/programs/q-bypass").json()["tokens_used"] >= sum(results)


def test_a_cancelled_programs_usage_counts_the_tokens_it_was_sent(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-cancel")
    received: list[int] = []
    streamer = threading.Thread(
        target=lambda: received.append(_stream_tokens(server, "q-cancel", 2000, 2000))
    )
    streamer.start()
    with server.client() as c:
        wait_until(lambda: len(c.get("/v1/programs/q-cancel").json()["nodes"]) == 1)
        time.sleep(0.3)  # let it stream a while
        assert c.post("/v1/programs/q-cancel/cancel", json={}).status_code == 200
        streamer.join(30)
        program = c.get("/v1/programs/q-cancel").json()
    assert received[0] > 0
    (node,) = program["nodes"]
    assert node["output_tokens"] >= received[0]  # streamed before the cancel: charged
    assert program["tokens_used"] >= received[0]
    assert program["attained_service_s"] > 0


def test_a_prompt_that_would_pass_the_token_quota_is_refused_before_it_runs(
    server: LiveServer,
) -> None:
    """A prompt is charged at its call's end, and only spent calls were checked: one call of
    78,897 prompt tokens went through a 100-token quota. Its uncached prompt is counted from
    its start: the call is refused (nothing ran, nothing charged) and the program runs on."""
    with server.client() as c:
        _open(c, "q-prompt", tokens=100)
        body = chat_body("x" * 400, max_tokens=4)  # ~113 prompt tokens
        refused = c.post(
            "/v1/chat/completions", json={**body, "agentconsole": {"program_id": "q-prompt"}}
        )
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert (error["type"], error["param"]) == ("quota_exceeded", "quotas.tokens")
        assert "uncached tokens" in error["message"]
        assert refused.headers["x-should-retry"] == "false"
        program = c.get("/v1/programs/q-prompt").json()
        assert (program["state"], program["tokens_used"]) == ("running", 0)
        short = chat_body("short", max_tokens=4)
        fits = c.post(
            "/v1/chat/completions", json={**short, "agentconsole": {"program_id": "q-prompt"}}
        )
        assert fits.status_code == 200, fits.text


def test_parallel_calls_count_their_prompts_against_the_token_quota(server: LiveServer) -> None:
    """Four calls sent at once on a 100-token quota ended with 312 tokens used: what they
    received counted together, their prompts only at their ends, so every one was let in."""
    with server.client() as c:
        _open(c, "q-burst", tokens=100)
    body = {
        **chat_body("y" * 120, max_tokens=90, ignore_eos=True),
        "agentconsole": {"program_id": "q-burst"},
    }

    def send() -> None:
        with server.client() as own:
            own.post("/v1/chat/completions", json=body)

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    with server.client() as c:
        wait_until(lambda: c.get("/v1/programs/q-burst").json()["state"] == "cancelled")
        program = c.get("/v1/programs/q-burst").json()
    # the prompts the engine computed fit in the quota (each counted from its call's start);
    # what they received past it is a delta per call at most, as for streams
    computed = sum(n["prompt_tokens"] - n["cached_tokens"] for n in program["nodes"])
    assert computed <= 100, program["nodes"]
    assert program["tokens_used"] <= 100 + sum(n["output_tokens"] for n in program["nodes"])
