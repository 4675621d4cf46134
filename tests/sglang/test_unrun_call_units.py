"""A call SGLang ends without running it leaves its program's last context as it was.

The adapter remembers the context each program's last call left on the engine (``lastcalls``),
which ``context_of`` answers until the plugin's placement sweep covers it again: the driver's
tool-wait and door decisions read it. A call the engine never ran (refused before queueing,
a router worker's 400, aborted while it waited in SGLang's queue, held at the drain gate)
computed nothing and left nothing there; it used to be remembered as an empty context (its
abort chunk carries no ``prompt_tokens``), so the program read as holding nothing cached. A
call aborted at the drain gate before its task took a step is settled by the abort itself (its
task's own end never ran: it stayed in the books). A fake engine here (its tokenizer manager),
as ``test_engine_refusal_units`` has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.runtime import (
    GenerationRequest,
    PrefixProbe,
    ProgramContext,
    Prompt,
)
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.cluster.options import ClusterSettings
from agentconsole.server.runtime.sglang.cluster.runtime import RouterRuntime
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.stream import SGLangStream

TENANT = "t1"
PROMPT = list(range(100, 200))  # the first call's 100 prompt tokens, 60 of them cached
OUTPUT = [7, 8]
#: what the first call left: its prompt past the cache and its output (own), the cache shared
LEFT = ProgramContext(private_tokens=100 - 60 + 2, shared_tokens=60)
NEXT = (*PROMPT, *OUTPUT, 300, 301)  # the program's next prompt extends that context


def _ran_chunk(rid: str) -> dict[str, Any]:
    """The last chunk of a call that ran: a batch output, with the figures of its pass."""
    meta = {
        "id": rid,
        "prompt_tokens": len(PROMPT),
        "cached_tokens": 60,
        "completion_tokens": len(OUTPUT),
        "finish_reason": {"type": "stop"},
    }
    return {"text": "ok", "meta_info": meta, "prompt_token_ids": PROMPT, "output_ids": OUTPUT}


def _queue_abort_chunk(rid: str) -> dict[str, Any]:
    """SGLang 0.5.23's end of a call aborted in its waiting queue (``send_abort_output``): no
    batch output, so no ``prompt_tokens`` or ``cached_tokens``."""
    reason = {"type": "abort", "message": "Abort in waiting queue", "status_code": None}
    meta = {"id": rid, "finish_reason": reason, "completion_tokens": 0, "e2e_latency": 0.1}
    return {"text": "", "meta_info": meta}


class _Manager:
    """A tokenizer manager: ``p1/n1/1`` runs to its end; ``*/refused`` is refused before it is
    queued (``ValueError``); any other call waits in the queue until it is aborted."""

    def __init__(self) -> None:
        self.rid_to_state: dict[str, asyncio.Event] = {}

    async def generate_request(self, obj: Any, request: Any) -> AsyncIterator[dict[str, Any]]:
        rid = obj.rid
        if rid.endswith("/refused"):
            raise ValueError("min_p must be in [0, 1], got 1.5.")
        if rid == "p1/n1/1":
            yield _ran_chunk(rid)
            return
        aborted = self.rid_to_state[rid] = asyncio.Event()
        await aborted.wait()
        del self.rid_to_state[rid]
        yield _queue_abort_chunk(rid)

    def abort_request(self, rid: str) -> None:
        self.rid_to_state[rid].set()


class _Engine:
    def __init__(self) -> None:
        self.tokenizer_manager = _Manager()


def _request(call_id: str) -> GenerationRequest:
    program, node, _ = call_id.split("/")
    ticket = CallTicket(call_id, program, node, TENANT, arrival=0.0)
    return GenerationRequest(ticket, "x", max_tokens=8, cache_namespace=TENANT, prompt_ids=NEXT)


def _runtime(tmp_path: Path) -> SGLangRuntime:
    rt = SGLangRuntime(EngineSettings(model_path=tmp_path, plugin=False), state_dir=tmp_path)
    rt.engine = _Engine()
    return rt


def _seen(rt: SGLangRuntime | RouterRuntime) -> tuple[ProgramContext | None, PrefixProbe]:
    """What the driver reads of ``p1`` (``context_of``) and its next prompt's probe."""
    probe = rt.probe("p1", Prompt("", len(NEXT), NEXT), TENANT)
    return rt.context_of("p1"), probe


async def _refused(rt: SGLangRuntime) -> None:
    """Refused before it was queued (SGLang's ``ValueError``: the client's 400)."""
    result = await rt.submit(_request("p1/n2/refused")).result()
    assert result.engine_abort_status == 400


async def _aborted_in_queue(rt: SGLangRuntime) -> None:
    """Aborted while it waited in SGLang's queue (the program's cancel, a client gone)."""
    call = rt.submit(_request("p1/n2/1"))
    assert await rt.abort("p1/n2/1")
    assert (await call.result()).finish_reason == "abort"


async def _aborted_at_the_gate(rt: SGLangRuntime) -> None:
    """Held at the adapter's drain gate, then aborted: it never reached SGLang."""
    rt._gate.clear()
    call = rt.submit(_request("p1/n2/1"))
    assert await rt.abort("p1/n2/1")
    assert (await call.result()).finish_reason == "abort"
    rt._gate.set()


@pytest.mark.parametrize("unrun", [_refused, _aborted_in_queue, _aborted_at_the_gate])
def test_a_call_the_engine_never_ran_leaves_the_programs_context(
    tmp_path: Path, unrun: Callable[[SGLangRuntime], Awaitable[None]]
) -> None:
    rt = _runtime(tmp_path)

    async def scenario() -> None:
        result = await rt.submit(_request("p1/n1/1")).result()
        assert result.finish_reason == "stop"
        seen = _seen(rt)
        assert seen[0] == LEFT
        assert seen[1].cached_tokens == len(PROMPT) + len(OUTPUT) - 1  # its last id: no KV
        await unrun(rt)
        assert rt._calls == {}
        assert _seen(rt) == seen

    asyncio.run(scenario())


def test_a_retracted_call_aborted_in_the_queue_keeps_its_last_passes_figures(
    tmp_path: Path,
) -> None:
    """A call that ran, was retracted back to the queue and aborted there ends with SGLang's
    queue abort chunk (no figures): what it left is what its last forward pass reported."""
    rt = _runtime(tmp_path)
    call = SGLangStream(_request("p1/n1/1"))
    ran = _ran_chunk(call.rid)
    ran["meta_info"] = {**ran["meta_info"], "finish_reason": None}
    call.feed(ran)
    call.feed(_queue_abort_chunk(call.rid))
    rt._calls[call.rid] = call
    rt._settle(call, None)
    assert rt.context_of("p1") == LEFT


def test_a_request_a_router_worker_refuses_leaves_the_programs_context(tmp_path: Path) -> None:
    """``sglang-router``: a worker's 400 before the stream began ends the call as the engine's
    own abort of it; the program's context is what its last call that ran left."""

    def answer(request: httpx.Request) -> httpx.Response:
        body = {"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}
        return httpx.Response(400, json=body)

    settings = EngineSettings(model_path=tmp_path)
    rt = RouterRuntime(settings, ClusterSettings("http://r", ("http://w0",)))

    async def scenario() -> None:
        rt.engine = httpx.AsyncClient(base_url="http://r", transport=httpx.MockTransport(answer))
        try:
            ran = SGLangStream(_request("p1/n1/1"))
            chunk = _ran_chunk(ran.rid)
            rt.telemetry.on_chunk(ran, chunk)
            ran.feed(chunk)
            rt._calls[ran.rid] = ran
            rt._settle(ran, None)
            seen = _seen(rt)
            assert seen[0] == LEFT
            result = await rt.submit(_request("p1/n2/1")).result()
            assert (result.finish_reason, result.engine_abort_status) == ("abort", 400)
            assert _seen(rt) == seen
        finally:
            await rt.engine.aclose()
            await rt.workers._client.aclose()

    asyncio.run(scenario())


def test_a_router_call_aborted_at_the_drain_gate_ends_and_leaves_the_context(
    tmp_path: Path,
) -> None:
    """``sglang-router``: a call held at the drain gate and aborted before its task took a
    step ends (its stream too) and is out of the books; the program's context stands."""
    rt = RouterRuntime(
        EngineSettings(model_path=tmp_path), ClusterSettings("http://r", ("http://w0",))
    )

    async def scenario() -> None:
        rt.engine = object()  # as once started; the gate holds the call before any request
        try:
            ran = SGLangStream(_request("p1/n1/1"))
            ran.feed(_ran_chunk(ran.rid))
            rt._calls[ran.rid] = ran
            rt._settle(ran, None)
            seen = rt.context_of("p1")
            assert seen == LEFT
            rt._gate.clear()
            call = rt.submit(_request("p1/n2/1"))
            assert await rt.abort("p1/n2/1")
            result = await asyncio.wait_for(call.result(), 1.0)
            assert result.finish_reason == "abort"
            assert rt._calls == {}
            assert rt.context_of("p1") == seen
        finally:
            await rt.workers._client.aclose()

    asyncio.run(scenario())


def test_a_call_is_settled_once(tmp_path: Path) -> None:
    """An abort settles its call again after the call's own task (for a task that never took a
    step): the second settle changes nothing, a failed call's included (it leaves no context
    to decide on, and its cache hits count once)."""
    rt = _runtime(tmp_path)

    async def scenario() -> None:
        failed = SGLangStream(_request("p1/n1/1"))
        failed.feed(
            {**_ran_chunk(failed.rid), "meta_info": {"prompt_tokens": 100, "cached_tokens": 60}}
        )
        rt._calls[failed.rid] = failed
        rt._settle(failed, RuntimeError("the stream broke"))
        rt._settle(failed, None)
        assert rt.context_of("p1") is None
        assert rt._hit_tokens == 60
        with pytest.raises(RuntimeError, match="the stream broke"):
            await failed.result()

    asyncio.run(scenario())
