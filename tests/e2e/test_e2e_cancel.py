"""Cancel, disconnect and preempt over real HTTP with the simulated runtime in real time.

* cancel: when the cancel answers, the call is out of the runtime; the stream gets no token
  afterwards and ends with an error frame; no ghost token is counted;
* a client that disconnects mid-stream (or while waiting for a non-streamed answer) gets its
  generation aborted;
* an operator preempt requeues a running call, which then completes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.events import EventKind
from agentconsole.server.api.express import ExpressLane
from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def realtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("rt")) / "rt.duckdb"
    with LiveServer(make_config(db, runtime_extra={"time_scale": 1.0})) as server:
        server.wait_ready()
        yield server


def _long_call(pid: str, stream: bool = True, tokens: int = 4000) -> dict[str, Any]:
    return chat_body(
        "write a lot",
        max_tokens=tokens,
        ignore_eos=True,
        stream=stream,
        agentconsole={"program_id": pid},
    )


class StreamReader:
    """Reads a streamed completion in a thread, timestamping every frame."""

    def __init__(self, server: LiveServer, body: dict[str, Any]) -> None:
        self.frames: list[tuple[float, dict[str, Any] | str]] = []
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(server, body), daemon=True)
        self._thread.start()

    def _run(self, server: LiveServer, body: dict[str, Any]) -> None:
        with server.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    payload = line[6:]
                    parsed = payload if payload == "[DONE]" else json.loads(payload)
                    self.frames.append((time.monotonic(), parsed))
        self.done.set()

    def content_frames(self) -> list[tuple[float, str]]:
        out = []
        for t, frame in self.frames:
            if isinstance(frame, dict) and frame.get("choices"):
                text = frame["choices"][0]["delta"].get("content")
                if text:
                    out.append((t, text))
        return out

    def tokens(self) -> int:
        return sum(len(text.split()) for _, text in self.content_frames())


def _events(server: LiveServer, kind: EventKind, pid: str) -> list[dict[str, Any]]:
    items, _ = server.live.hub.since(server.live.hub.oldest_seq() - 1, limit=10**6)
    return [dict(e.data) for _, e in items if e.kind is kind and e.program_id == pid]


def _in_runtime(server: LiveServer, pid: str) -> bool:
    snap = server.live.service.runtime.snapshot()
    return any(c.program_id == pid for c in snap.queued) or any(
        c.program_id == pid for c in snap.running
    )


def test_no_token_after_the_cancel_is_acknowledged(realtime: LiveServer) -> None:
    ghosts_before = realtime.live.metrics.counts.get("ghost_tokens", 0)
    reader = StreamReader(realtime, _long_call("cx-1"))
    wait_until(lambda: reader.tokens() >= 10, 10)
    with realtime.client() as c:
        ack = c.post("/v1/programs/cx-1/cancel")
    acked_at = time.monotonic()
    assert ack.status_code == 200
    body = ack.json()
    assert body["state"] == "cancelled"
    assert body["aborted_calls"] == ["cx-1/llm-1/0001"]
    assert not _in_runtime(realtime, "cx-1")  # confirmed out of the runtime at the ack
    assert reader.done.wait(5)
    late = [t for t, _ in reader.content_frames() if t > acked_at + 0.05]
    assert late == []
    errors = [f for _, f in reader.frames if isinstance(f, dict) and "error" in f]
    assert errors
    assert "aborted" in errors[0]["error"]["message"]
    assert reader.frames[-1][1] == "[DONE]"
    aborted = _events(realtime, EventKind.CALL_ABORTED, "cx-1")
    assert aborted
    assert aborted[0]["reason"] == "cancel"
    assert reader.tokens() <= aborted[0]["output_tokens"]
    assert realtime.live.metrics.counts.get("ghost_tokens", 0) == ghosts_before
    with realtime.client() as c:
        program = c.get("/v1/programs/cx-1").json()
        assert program["state"] == "cancelled"
        assert {n["state"] for n in program["nodes"]} == {"cancelled"}
        assert c.post("/v1/programs/cx-1/cancel").json()["aborted_calls"] == []


def test_disconnect_mid_stream_aborts_the_generation(realtime: LiveServer) -> None:
    with (
        realtime.client() as c,
        c.stream("POST", "/v1/chat/completions", json=_long_call("dc-1")) as r,
    ):
        received = 0
        for line in r.iter_lines():
            received += line.startswith("data: ")
            if received >= 5:
                break  # leaving the block closes the connection
    wait_until(lambda: _events(realtime, EventKind.CALL_ABORTED, "dc-1"), 5)
    assert _events(realtime, EventKind.CALL_ABORTED, "dc-1")[0]["reason"] == "disconnect"
    assert not _in_runtime(realtime, "dc-1")
    with realtime.client() as c:
        node = c.get("/v1/programs/dc-1/nodes/llm-1").json()
        program = c.get("/v1/programs/dc-1").json()
    assert node["state"] == "cancelled"
    assert program["state"] == "running"  # the agent may retry the node


def test_disconnect_while_waiting_for_a_plain_answer_aborts(realtime: LiveServer) -> None:
    lane = realtime.app.asgi_handler  # a plain call: the express lane answers it
    assert isinstance(lane, ExpressLane)
    before = lane.answered
    with (
        realtime.client(timeout=httpx.Timeout(30, read=0.5)) as c,
        pytest.raises(httpx.ReadTimeout),
    ):
        c.post("/v1/chat/completions", json=_long_call("dc-2", stream=False))
    wait_until(lambda: _events(realtime, EventKind.CALL_ABORTED, "dc-2"), 5)
    assert _events(realtime, EventKind.CALL_ABORTED, "dc-2")[0]["reason"] == "disconnect"
    assert not _in_runtime(realtime, "dc-2")
    assert lane.answered == before + 1


def test_preempted_call_is_requeued_and_completes(realtime: LiveServer) -> None:
    reader = StreamReader(realtime, _long_call("pre-1", tokens=150))
    wait_until(lambda: reader.tokens() >= 5, 10)
    with realtime.client("sk-operator") as op:
        preempted = op.post("/v1/operator/programs/pre-1/preempt").json()
    assert preempted["preempted_calls"] == ["pre-1/llm-1/0001"]
    # once it delivers again its node runs again (it read "ready" until the call ended)
    seen = reader.tokens()
    wait_until(lambda: reader.tokens() > seen + 5 or reader.done.is_set(), 10)
    with realtime.client() as c:
        node = c.get("/v1/programs/pre-1").json()["nodes"][0]
    assert node["state"] in ("running", "done"), node
    assert reader.done.wait(15)
    finals = [f for _, f in reader.frames if isinstance(f, dict) and f.get("choices")]
    assert finals[-1]["choices"][0]["finish_reason"] == "length"
    assert _events(realtime, EventKind.CALL_PREEMPTED, "pre-1")
    # the node the preempt requeued completes with its call, charged once
    with realtime.client() as c:
        wait_until(lambda: c.get("/v1/programs/pre-1").json()["nodes"][0]["state"] == "done", 5)
        program = c.get("/v1/programs/pre-1").json()
    assert program["nodes"][0]["output_tokens"] == 150
    spans = program["nodes"][0]["timeline"]
    assert all(span["end"] >= span["start"] for span in spans), spans  # no span runs backwards
