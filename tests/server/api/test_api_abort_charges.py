"""What an aborted call is charged for its prompt, over real HTTP with the simulated runtime:
a call cancelled while it waited in the engine's queue (never scheduled) computed nothing and
pays nothing for its prompt (program quota, tenant's tokens per minute, metrics), and its end
event reports the time it waited as its queue time and no service; a call cancelled while it
decodes pays its whole uncached prompt, as before."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.runtime import GenerationResult
from agentconsole.server.live.accounting import usage_data
from agentconsole.server.live.reopen import rebuild
from agentconsole.server.store.records import AttemptRecord, NodeRecord, ProgramRecord
from agentconsole.server.store.repository import ProgramView, StoredEvent
from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until

TENANT = "tenant-a"  # the harness's sk-a
#: seconds the queued call is left waiting before its cancel
WAIT_S = 0.5


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    """A server of its own: the test pauses its engine."""
    with LiveServer(make_config(tmp_path / "aborts.duckdb")) as live:
        live.wait_ready()
        yield live


def _prompt() -> str:
    """About 400 tokens (the simulator counts 4 characters a token) no other prompt shares."""
    return uuid.uuid4().hex * 50


def _stream_in_background(server: LiveServer, pid: str, max_tokens: int) -> threading.Thread:
    """A streamed call of ``pid`` read to its end (the cancel's error frame) in a thread."""
    body = chat_body(_prompt(), max_tokens=max_tokens, ignore_eos=True, stream=True)
    body["agentconsole"] = {"program_id": pid}

    def read() -> None:
        with server.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
            for _ in r.iter_lines():
                pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def _events(server: LiveServer, kind: EventKind, pid: str) -> list[dict[str, Any]]:
    items, _ = server.live.hub.since(server.live.hub.oldest_seq() - 1, limit=10**6)
    return [dict(e.data) for _, e in items if e.kind is kind and e.program_id == pid]


def _queued_in_engine(server: LiveServer, pid: str) -> bool:
    return any(c.program_id == pid for c in server.live.service.runtime.snapshot().queued)


def _tenant_minute(server: LiveServer) -> int:
    return server.live.service.tenants.usage(TENANT, time.time())["tokens_last_minute"]


def _cancel(server: LiveServer, pid: str) -> None:
    with server.client() as c:
        answer = c.post(f"/v1/programs/{pid}/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json()["aborted_calls"] == [f"{pid}/llm-1/0001"]


def test_a_call_cancelled_while_queued_in_the_engine_is_charged_no_prompt(
    server: LiveServer,
) -> None:
    runtime = server.live.service.runtime
    server.run(runtime.pause())  # the engine admits nothing: the call waits in its queue
    reader = _stream_in_background(server, "ab-queued", max_tokens=64)
    wait_until(lambda: _queued_in_engine(server, "ab-queued"))
    queued_at = time.monotonic()
    time.sleep(WAIT_S)
    _cancel(server, "ab-queued")
    waited = time.monotonic() - queued_at
    server.run(runtime.resume())
    reader.join(10)
    assert _events(server, EventKind.CALL_QUEUED, "ab-queued")
    assert not _events(server, EventKind.CALL_SCHEDULED, "ab-queued")  # it never ran
    (aborted,) = _events(server, EventKind.CALL_ABORTED, "ab-queued")
    assert aborted["computed_tokens"] == 0
    assert aborted["output_tokens"] == 0
    # its whole wait is queue time (it was 0.0), none of it service
    assert WAIT_S - 0.05 <= aborted["queue_s"] <= waited + 0.05
    assert aborted["service_s"] == 0.0
    with server.client() as c:
        program = c.get("/v1/programs/ab-queued").json()
    assert program["tokens_used"] == 0  # it was the whole prompt, ~413
    assert program["attained_service_s"] == 0.0
    assert _tenant_minute(server) == 0
    assert server.live.metrics.counts.get("computed_tokens", 0) == 0


def test_a_call_cancelled_while_decoding_is_charged_its_prompt(server: LiveServer) -> None:
    reader = _stream_in_background(server, "ab-decoding", max_tokens=30_000)
    wait_until(lambda: _events(server, EventKind.CALL_FIRST_TOKEN, "ab-decoding"))
    time.sleep(0.2)  # it streams a while
    _cancel(server, "ab-decoding")
    reader.join(10)
    assert _events(server, EventKind.CALL_SCHEDULED, "ab-decoding")
    (aborted,) = _events(server, EventKind.CALL_ABORTED, "ab-decoding")
    prompt = aborted["prompt_tokens"]
    assert prompt > 300
    assert aborted["computed_tokens"] == prompt - aborted["cached_tokens"] > 300
    assert aborted["output_tokens"] > 0
    assert aborted["service_s"] > 0
    charged = aborted["computed_tokens"] + aborted["charged_output_tokens"]
    with server.client() as c:
        program = c.get("/v1/programs/ab-decoding").json()
    assert program["tokens_used"] == charged
    assert _tenant_minute(server) == charged


def test_a_restart_replays_an_aborted_calls_end_to_the_charge_it_made() -> None:
    """The end event of a call aborted in the queue, past the rows a crash kept, charges the
    program at the restart what it was charged live: nothing for its prompt (the replay
    charges an end's ``prompt_tokens - cached_tokens``, ``eventtail.py``)."""
    never_ran = GenerationResult("abort", "", 413, 0, 0, queue_s=2.1, prefilled_tokens=0)
    data = {**usage_data(never_ran), "outcome": "aborted", "charged_output_tokens": 0}
    aborted = Event(6.0, EventKind.CALL_ABORTED, "p", "n", 1, "t", data)
    synced = {"synced_seq": 10}
    view = ProgramView(
        ProgramRecord("p", "t", "running", 1.0, 2.0, data={"tokens_used": 40, **synced}),
        (NodeRecord("p", "n", "llm", "running", 1.0, 2.0, (), 1, {"branch": "main", **synced}),),
        (AttemptRecord("p", "n", 1, "running", 4.0),),
    )
    program = rebuild(view, now=50.0, tail=[StoredEvent(11, aborted)])
    assert data["computed_tokens"] == 0
    assert program.tokens_used == 40  # it was 40 + 413
