"""Which calls a drain refuses: those that arrive once it began, even while it still waits for
the runtime's pause (on SGLang the pause waits for the plugin's acknowledgement), so the flag
is set first; not a call that arrived before it and still awaits its admission (the store, its
quotas, the door): that one runs when the drain ends, as the calls queued in the engine do
(refusing it there answered 503 after its wait, its program opened and left empty)."""

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


def test_a_call_on_its_way_in_when_the_drain_began_runs_when_it_ends(
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
        with server.client() as tenant:  # a call arriving now is refused
            late = tenant.post("/v1/chat/completions", json=chat_body("late", max_tokens=4))
        assert late.status_code == 503, late.text

        async def let_go() -> None:
            release.set()

        server.run(let_go())
        time.sleep(0.5)
        assert answers == []  # it waits behind the paused runtime, not refused
        assert op.post("/v1/operator/drain", json={"enabled": False}).status_code == 200
    caller.join(20)
    (answer,) = answers
    assert answer.status_code == 200, answer.text


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
