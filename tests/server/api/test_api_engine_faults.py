"""A call the engine itself ends early: an abort this server did not ask for (SGLang's own,
out of memory or a retraction with nowhere to go) and a failure after tokens were streamed.
The client is told 503 (retry), the call's node does not complete (its answer was cut), the
program goes on, and what reached the client is charged to the program."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentconsole.scheduler.runtime import (
    CONTEXT_LENGTH_EXCEEDED,
    GenerationRequest,
    GenerationResult,
    TokenDelta,
)
from agentconsole.scheduler.tokenstream import TokenStream
from agentconsole.server.live.reopen import programs_to_restore, rebuild_created
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from tests.server.api.harness import LiveServer, chat_body, make_config

CHAT = "/v1/chat/completions"
#: tokens the faulty engine streams before it ends the call
STREAMED = 3
_RUNNING: set[asyncio.Future[None]] = set()


#: SGLang's refusal of a prompt over its context (its tokenizer manager's words)
OVERLONG = "The input (131100 tokens) is longer than the model's context length (131072 tokens)."


class FaultyEngine(SimLiveRuntime):
    """The simulated runtime, except for prompts naming a fault: ``ENGINE-ABORT`` ends the
    call with the engine's own abort, ``ENGINE-FAIL`` breaks the stream, each after
    :data:`STREAMED` tokens; ``ENGINE-REFUSE`` and ``ENGINE-OVERLONG`` are SGLang's refusals
    of a request (the second of a prompt over its context, before any token); ``ENGINE-DOWN``
    raises from ``submit`` itself (an engine whose process is gone)."""

    def submit(self, request: GenerationRequest) -> Any:
        if "ENGINE-DOWN" in request.prompt:
            raise RuntimeError("the engine's process is gone")
        for fault in ("ENGINE-ABORT", "ENGINE-FAIL", "ENGINE-REFUSE", "ENGINE-OVERLONG"):
            if fault in request.prompt:
                stream = TokenStream()
                task = asyncio.ensure_future(self._fault(stream, fault))
                _RUNNING.add(task)  # a reference until it ends (the loop keeps only weak ones)
                task.add_done_callback(_RUNNING.discard)
                return stream
        return super().submit(request)

    @staticmethod
    async def _fault(stream: TokenStream, fault: str) -> None:
        if fault == "ENGINE-OVERLONG":
            await asyncio.sleep(0.01)
            refused = GenerationResult("abort", "", 131_100, 0, 0, prefilled_tokens=0)
            stream.end(
                replace(
                    refused,
                    engine_abort_status=400,
                    engine_abort_message=OVERLONG,
                    engine_abort_code=CONTEXT_LENGTH_EXCEEDED,
                )
            )
            return
        for _ in range(STREAMED):
            await asyncio.sleep(0.01)
            stream.push(TokenDelta(" tok", 1))
        if fault == "ENGINE-FAIL":
            stream.fail(RuntimeError("the engine's process died"))
            return
        # SGLang's own aborts: a retraction with nowhere to go (503), a request it cannot
        # serve (400, e.g. sampling support over its limit)
        status, message = (503, "Retry later") if fault == "ENGINE-ABORT" else (400, "lower top_k")
        cut = GenerationResult("abort", " tok" * STREAMED, 12, 0, STREAMED)
        stream.end(replace(cut, engine_abort_status=status, engine_abort_message=message))


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("faults")) / "faults.duckdb"
    engine = FaultyEngine(preset("H200-141GB", "llama-3.1-8b", 1), time_scale=0.05)
    # rows never written by the clock: a rebuild reads these programs from the event tail
    with LiveServer(make_config(db, store_sync_s=3600.0), runtime=engine) as live:
        live.wait_ready()
        yield live


def _program(live: LiveServer, pid: str) -> dict[str, Any]:
    with live.client() as client:
        found: dict[str, Any] = client.get(f"/v1/programs/{pid}").json()
    return found


def test_an_engine_abort_is_a_503_and_its_node_does_not_complete(faulty: LiveServer) -> None:
    with faulty.client() as client:
        cut = client.post(CHAT, json=chat_body("ENGINE-ABORT", max_tokens=20),
                          headers={"X-Program-Id": "fault-abort"})  # fmt: skip
        assert cut.status_code == 503, cut.text
        assert cut.json()["error"]["type"] == "unavailable"
        after = client.post(CHAT, json=chat_body("go on", max_tokens=4),
                            headers={"X-Program-Id": "fault-abort"})  # fmt: skip
        assert after.status_code == 200, after.text
    program = _program(faulty, "fault-abort")
    assert program["state"] == "running"
    states = {n["node_id"]: n["state"] for n in program["nodes"]}
    assert states["llm-1"] != "done"  # the cut answer completes nothing
    assert program["nodes_done"] == 1  # the call after it


def test_a_stream_the_engine_breaks_ends_with_an_error_and_is_charged(faulty: LiveServer) -> None:
    body = chat_body("ENGINE-FAIL", max_tokens=20, stream=True)
    with (
        faulty.client() as client,
        client.stream("POST", CHAT, json=body, headers={"X-Program-Id": "fault-fail"}) as response,
    ):
        frames = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    error = json.loads(frames[-2])["error"]
    assert error["type"] == "unavailable", error
    program = _program(faulty, "fault-fail")
    assert program["state"] == "running"
    assert program["nodes_done"] == 0
    assert all(n["state"] != "running" for n in program["nodes"])  # not left running
    assert program["tokens_used"] >= STREAMED  # what reached the client is paid


def test_a_restart_rebuilds_what_the_failed_calls_charged(faulty: LiveServer) -> None:
    """The event tail a restart replays (``eventtail.py``) charges a failed call's tokens
    and closes its node as the live server did (``call.failed`` carries them)."""
    live = faulty.live
    with faulty.client() as client:  # the two programs of the tests above, or made here
        for pid, fault in (("fault-abort", "ENGINE-ABORT"), ("fault-fail", "ENGINE-FAIL")):
            if client.get(f"/v1/programs/{pid}").status_code == 404:
                client.post(CHAT, json=chat_body(fault, max_tokens=20),
                            headers={"X-Program-Id": pid})  # fmt: skip

    async def restore() -> list[Any]:
        await asyncio.wrap_future(live.store.writer.flush())
        return await asyncio.to_thread(programs_to_restore, live.store.repo)

    restored = {tail[0].event.program_id: tail for view, tail in faulty.run(restore())}
    for pid in ("fault-abort", "fault-fail"):
        rebuilt = rebuild_created(restored[pid], 0.0)
        assert rebuilt is not None
        held = live.service.controller.programs[pid]
        assert rebuilt.tokens_used == held.tokens_used > 0
        states = {nid: n.state for nid, n in rebuilt.nodes.items()}
        assert states == {nid: n.state for nid, n in held.nodes.items()}


def test_a_call_the_runtime_refuses_at_submit_fails_as_the_store_rebuilds_it(
    faulty: LiveServer,
) -> None:
    """A call whose ``submit`` raises is 503 (retry) and fails its node's attempt: the event
    log says so (``call.failed``, the node failed), so a restart rebuilds the node as the live
    server held it, not running; the program goes on."""
    live = faulty.live
    with faulty.client() as client:
        down = client.post(CHAT, json=chat_body("ENGINE-DOWN", max_tokens=20),
                           headers={"X-Program-Id": "fault-down"})  # fmt: skip
        assert down.status_code == 503, down.text
        assert "the runtime refused the call" in down.json()["error"]["message"]
        after = client.post(CHAT, json=chat_body("go on", max_tokens=4),
                            headers={"X-Program-Id": "fault-down"})  # fmt: skip
        assert after.status_code == 200, after.text

    async def restore() -> list[Any]:
        await asyncio.wrap_future(live.store.writer.flush())
        return await asyncio.to_thread(programs_to_restore, live.store.repo)

    program = _program(faulty, "fault-down")
    assert program["state"] == "running"
    assert [n["state"] for n in program["nodes"]] == ["failed", "done"]
    restored = {tail[0].event.program_id: tail for view, tail in faulty.run(restore())}
    rebuilt = rebuild_created(restored["fault-down"], 0.0)
    assert rebuilt is not None
    held = live.service.controller.programs["fault-down"]
    states = {nid: n.state for nid, n in rebuilt.nodes.items()}
    assert states == {nid: n.state for nid, n in held.nodes.items()}
    assert faulty.live.metrics.counts.get("calls_failed", 0) >= 1


def test_an_engine_refusal_of_the_request_is_a_400_with_its_message(faulty: LiveServer) -> None:
    """An abort the engine says is the request's fault (a 4xx status) is not worth a retry:
    400 with the engine's message, where a retraction's is 503."""
    with faulty.client() as client:
        refused = client.post(CHAT, json=chat_body("ENGINE-REFUSE", max_tokens=20),
                              headers={"X-Program-Id": "fault-refuse"})  # fmt: skip
    assert refused.status_code == 400, refused.text
    assert "lower top_k" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (CHAT, chat_body("ENGINE-OVERLONG", max_tokens=20), "messages"),
        (
            "/v1/completions",
            {"model": "m", "prompt": "ENGINE-OVERLONG", "max_tokens": 20},
            "prompt",
        ),
    ],
    ids=["chat", "completions"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_the_engines_refusal_of_a_prompt_over_its_context_reads_as_the_intakes(
    faulty: LiveServer, path: str, body: dict[str, Any], field: str, stream: bool
) -> None:
    """SGLang's own refusal of a prompt too long (one the intake let through): 400
    ``context_length_exceeded`` (a stream's error frame alike) naming the prompt's field, its
    message opened as the intake's own refusal and OpenAI's (the served model's context:
    what LiteLLM matches to tell an overflow), then SGLang's words."""
    headers = {"X-Program-Id": f"fault-overlong-{field}-{stream}"}
    with faulty.client() as client:
        if stream:
            with client.stream(
                "POST", path, json={**body, "stream": True}, headers=headers
            ) as answer:
                frames = [line[6:] for line in answer.iter_lines() if line.startswith("data: ")]
            assert frames[-1] == "[DONE]"
            error = json.loads(frames[-2])["error"]
        else:
            refused = client.post(path, json=body, headers=headers)
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "context_length_exceeded")
    assert error["param"] == field
    context = faulty.live.service.runtime.max_context_tokens
    assert error["message"] == (
        f"This model's maximum context length is {context} tokens; the engine refused the"
        f" call: {OVERLONG}"
    )


def test_failed_calls_are_counted_apart_from_aborted_ones(faulty: LiveServer) -> None:
    with faulty.client() as client:
        client.post(CHAT, json=chat_body("ENGINE-ABORT", max_tokens=20),
                    headers={"X-Program-Id": "fault-counted"})  # fmt: skip
    counts = faulty.live.metrics.counts
    assert counts.get("calls_failed", 0) >= 1
    with faulty.client(None) as ops:
        exposed = ops.get("/metrics").text
    assert "agentconsole_llm_calls_failed_total" in exposed
