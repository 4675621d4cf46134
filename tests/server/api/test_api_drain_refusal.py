"""During an operator's drain (``POST /v1/operator/drain``) a new generation call is refused at
once: 503 ``draining`` with ``Retry-After`` and ``x-should-retry: true``, before a program is
opened or anything is held for it. It used to be let in and queued behind the paused runtime,
unanswered for as long as the drain lasted (an OpenAI client waited out its 600 s timeout).

Both lanes answer it alike: the express lane (``api/express.py``) and Litestar's routes (a
server with ``express_lane=False``), streaming or not, chat and text completions. A program's
create, reads and tool reports still pass, and once the drain ends the same call is served.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentconsole.server.api.express import ExpressLane
from tests.server.api.harness import (
    OPERATOR,
    LiveServer,
    both_lanes,
    chat_body,
    gateway_server,
)

#: a refused call must be answered well within this; one let in waits for the drain's end
PROMPT_ANSWER_S = 5.0
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    with both_lanes(Path(tmp_path_factory.mktemp("drain"))) as (lane, routes):
        yield {"lane": lane, "routes": routes}


def set_drain(server: LiveServer, enabled: bool) -> None:
    """Start (or end) the operator's drain on ``server``."""
    with server.client(OPERATOR) as op:
        answer = op.post("/v1/operator/drain", json={"enabled": enabled})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"draining": enabled}


def generation_body(path: str, program_id: str | None, stream: bool) -> dict[str, Any]:
    """A chat or text completion of ``program_id`` (None: an inferred program)."""
    extra: dict[str, Any] = {"stream": stream, "max_tokens": 4}
    if program_id is not None:
        extra["agentconsole"] = {"program_id": program_id}
    if path == COMPLETIONS:
        return {"model": "sim", "prompt": f"drained {program_id}", **extra}
    return chat_body(f"drained {program_id}", **extra)


def answered_by_lane(server: LiveServer) -> int:
    """How many calls the express lane answered itself (0 on a server without it)."""
    handler = server.app.asgi_handler
    return handler.answered if isinstance(handler, ExpressLane) else 0


def assert_draining_refusal(answer: httpx.Response, took_s: float) -> None:
    assert answer.status_code == 503, answer.text
    assert took_s < PROMPT_ANSWER_S
    assert answer.headers["retry-after"] == "5"
    assert answer.headers["x-should-retry"] == "true"
    error = answer.json()["error"]
    assert (error["type"], error["code"]) == ("draining", "draining")
    assert "draining" in error["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("lane", ["lane", "routes"])
def test_a_new_call_during_a_drain_is_refused_at_once_and_served_after_it(
    servers: dict[str, LiveServer], lane: str, path: str, stream: bool
) -> None:
    server = servers[lane]
    program_id = f"drained-{lane}-{'chat' if path == CHAT else 'text'}-{stream}"
    body = generation_body(path, program_id, stream)
    set_drain(server, True)
    try:
        before = answered_by_lane(server)
        with server.client(timeout=PROMPT_ANSWER_S * 2) as tenant:
            started = time.monotonic()
            refused = tenant.post(path, json=body)
            took_s = time.monotonic() - started
            assert_draining_refusal(refused, took_s)
            # nothing was opened for it: no program, no node, nothing held by the tenant
            assert tenant.get(f"/v1/programs/{program_id}").status_code == 404
        assert program_id not in server.live.service.controller.programs
        assert answered_by_lane(server) == before + (lane == "lane")
    finally:
        set_drain(server, False)
    with server.client() as tenant:
        served = tenant.post(path, json=body)
        assert served.status_code == 200, served.text
        assert tenant.get(f"/v1/programs/{program_id}").status_code == 200


def test_an_unnamed_call_during_a_drain_opens_no_inferred_program(
    servers: dict[str, LiveServer],
) -> None:
    server = servers["lane"]
    known = set(server.live.service.controller.programs)
    set_drain(server, True)
    try:
        with server.client() as tenant:
            started = time.monotonic()
            refused = tenant.post(CHAT, json=generation_body(CHAT, None, stream=False))
            assert_draining_refusal(refused, time.monotonic() - started)
        assert set(server.live.service.controller.programs) == known
    finally:
        set_drain(server, False)


def test_the_openai_client_gets_the_refusal_at_once(servers: dict[str, LiveServer]) -> None:
    server = servers["lane"]
    client = openai.OpenAI(
        base_url=server.url + "/v1", api_key="sk-a", max_retries=0, timeout=PROMPT_ANSWER_S * 2
    )
    set_drain(server, True)
    try:
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as refused:
            client.chat.completions.create(
                model="sim",
                messages=[{"role": "user", "content": "while drained"}],
                max_tokens=4,
                extra_body={"agentconsole": {"program_id": "drained-openai"}},
            )
        assert time.monotonic() - started < PROMPT_ANSWER_S
        assert refused.value.status_code == 503
        assert refused.value.code == "draining"
        assert refused.value.response.headers["x-should-retry"] == "true"
    finally:
        set_drain(server, False)
    done = client.chat.completions.create(
        model="sim",
        messages=[{"role": "user", "content": "after the drain"}],
        max_tokens=4,
        extra_body={"agentconsole": {"program_id": "drained-openai"}},
    )
    assert done.choices[0].finish_reason in ("stop", "length")


def test_creates_reads_and_tool_reports_still_pass_during_a_drain(tmp_path: Path) -> None:
    with gateway_server(tmp_path / "tools.duckdb") as server:  # the reports' routes
        set_drain(server, True)
        with server.client() as tenant:
            created = tenant.post("/v1/programs", json={"program_id": "drained-tools"})
            assert created.status_code == 201, created.text
            report = {"node_id": "search-1", "tool": "search"}
            started = tenant.post("/v1/programs/drained-tools/tool-calls/start", json=report)
            assert started.status_code == 200, started.text
            finish = {"node_id": "search-1", "outcome": "ok", "latency_s": 0.1}
            ended = tenant.post("/v1/programs/drained-tools/tool-calls/finish", json=finish)
            assert ended.status_code == 200, ended.text
            program = tenant.get("/v1/programs/drained-tools")
            assert program.status_code == 200
            assert "search-1" in {node["node_id"] for node in program.json()["nodes"]}
