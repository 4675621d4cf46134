"""serve's door keeps room for the prefixes a tenant's programs share, over real HTTP on the
live simulated engine: the platform prompt once and each repository its agents work on once
(``scheduler.doorroom.shared_reserve``, from the segments the runtime's probe names). Kept for
one prefix per tenant, coding-agent's second repository went uncounted and the door let in
programs that thrashed (docs/BENCHMARKS.md 2t)."""

from __future__ import annotations

from pathlib import Path

import httpx

from agentconsole.scheduler.runtime import SEGMENT_TOKENS
from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config

PLATFORM = "platform tools: " + " ".join(f"tool_{i}(path, query)" for i in range(700)) + "\n"


def _repository(name: str) -> str:
    return f"repository {name}:\n" + "\n".join(f"{name}/src/module_{i}.py" for i in range(900))


def _first_call(client: httpx.Client, program_id: str, repository: str) -> int:
    """``program_id``'s first call over the platform prompt and ``repository``; the prompt
    tokens the engine served it from cache."""
    text = PLATFORM + _repository(repository) + f"\nthe task of {program_id}"
    body = {**chat_body(text, max_tokens=4), "agentconsole": {"program_id": program_id}}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    cached = response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert isinstance(cached, int)
    return cached


def _reserved(operator: httpx.Client) -> int:
    door = operator.get("/v1/operator/door").json()
    assert door["enabled"] is True
    reserved = door["reserved_tokens"]
    assert isinstance(reserved, int)
    return reserved


def test_the_door_keeps_room_for_each_repository_and_the_platform_prompt_once(
    tmp_path: Path,
) -> None:
    with (
        LiveServer(make_config(tmp_path / "reserve.duckdb")) as server,
        server.client() as c,
        server.client(OPERATOR) as operator,
    ):
        server.wait_ready()
        assert _first_call(c, "r0-first", "alpha") == 0  # computes the platform and alpha
        assert _reserved(operator) == 0  # nothing it holds is another program's
        alpha = _first_call(c, "r0-second", "alpha")
        platform = _first_call(c, "r1-first", "beta")  # the platform prompt only
        beta = _first_call(c, "r1-second", "beta")
        assert 0 < platform < min(alpha, beta)
        # the platform once, each repository once: more than the largest prefix by a
        # repository (the rule before), within a segment's tail of each distinct hit
        union = alpha + beta - platform
        reserved = _reserved(operator)
        assert max(alpha, beta) + SEGMENT_TOKENS < union <= reserved
        assert reserved <= union + 3 * SEGMENT_TOKENS
        # another tenant's programs share none of it: their room is their own
        with server.client("sk-b") as other:
            assert _first_call(other, "b-first", "alpha") == 0
        assert _reserved(operator) == reserved
        # alpha's programs end: its room frees (its first program held no one's prefix)
        for program_id in ("r0-first", "r0-second"):
            assert c.post(f"/v1/programs/{program_id}/finish", json={}).status_code == 200
        assert beta <= _reserved(operator) <= beta + 2 * SEGMENT_TOKENS
