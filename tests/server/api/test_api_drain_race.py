"""The drain's refusal holds for a call that was already on its way in when the drain began:
one awaiting its admission (the store, its quotas, the door) is refused once it gets past
them, with its door share given back, and the drain refuses calls before it waits for the
runtime's pause, not after (on SGLang the pause waits for the plugin's acknowledgement)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentconsole.scheduler.program import Program
from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(make_config(tmp_path / "race.duckdb")) as live:
        live.wait_ready()
        yield live


def test_a_call_admitted_across_the_drain_s_start_is_refused(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = server.live.service
    entered, release = threading.Event(), asyncio.Event()
    check_quotas = service.check_quotas

    async def held(program: Program, now: float) -> None:
        entered.set()
        await release.wait()  # the drain begins while this call awaits its admission
        await check_quotas(program, now)

    monkeypatch.setattr(service, "check_quotas", held)
    answers: list[httpx.Response] = []

    def call() -> None:
        with server.client() as tenant:
            body = chat_body("racing", max_tokens=4, agentconsole={"program_id": "racer"})
            answers.append(tenant.post("/v1/chat/completions", json=body, timeout=30))

    caller = threading.Thread(target=call)
    caller.start()
    assert entered.wait(10)
    with server.client(OPERATOR) as op:
        assert op.post("/v1/operator/drain", json={"enabled": True}).status_code == 200

    async def let_go() -> None:
        release.set()

    server.run(let_go())
    caller.join(10)
    (answer,) = answers
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "draining"
    # nothing of it runs when the drain ends: it was refused, not parked
    with server.client(OPERATOR) as op:
        assert op.post("/v1/operator/drain", json={"enabled": False}).status_code == 200
    time.sleep(0.2)
    with server.client() as tenant:
        nodes = tenant.get("/v1/programs/racer").json()["nodes"]
    assert all(node["state"] != "running" for node in nodes)


def test_the_drain_refuses_calls_before_it_waits_for_the_pause(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = server.live.service
    seen: list[bool] = []
    pause = service.runtime.pause

    async def pausing() -> None:
        seen.append(service.draining)  # what a call arriving during the pause would meet
        await pause()

    monkeypatch.setattr(service.runtime, "pause", pausing)
    with server.client(OPERATOR) as op:
        assert op.post("/v1/operator/drain", json={"enabled": True}).status_code == 200
    assert seen == [True]


def test_a_drain_whose_pause_fails_refuses_nothing(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken() -> None:
        raise RuntimeError("the engine did not acknowledge the pause")

    monkeypatch.setattr(server.live.service.runtime, "pause", broken)
    with server.client(OPERATOR) as op:
        assert op.post("/v1/operator/drain", json={"enabled": True}).status_code >= 500
    assert server.live.service.draining is False
    with server.client() as tenant:
        body = chat_body("after", max_tokens=4)
        assert tenant.post("/v1/chat/completions", json=body).status_code == 200
