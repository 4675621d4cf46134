"""``SGLangRuntime.abort`` for a call SGLang has not registered yet (it drops an abort for a
rid it does not know): the caller stops waiting after ``ABORT_WAIT_S`` (it used to get a
``TimeoutError``, which broke a program's cancel halfway), and the abort still goes as soon
as the rid is there; and what an aborted call's stream reports of the tokens generated
after the abort."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import adapter, wire
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.stream import SGLangStream


class _Call:
    def __init__(self) -> None:
        self.ended = False
        self.task = None
        self.aborting = False

    def begin_abort(self) -> None:
        self.aborting = True


def test_an_abort_before_sglang_has_the_call_goes_once_it_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(adapter, "ABORT_WAIT_S", 0.05)
    aborted: list[str] = []
    manager = SimpleNamespace(rid_to_state={}, abort_request=aborted.append)
    runtime: Any = object.__new__(SGLangRuntime)
    runtime.engine = SimpleNamespace(tokenizer_manager=manager)
    runtime._calls = {"p/n/0001": _Call()}
    runtime._gate = asyncio.Event()

    async def scenario() -> tuple[bool, list[str]]:
        runtime._gate.set()
        runtime._late_aborts = set()
        answered = await runtime.abort("p/n/0001")
        sent_before = list(aborted)
        manager.rid_to_state["p/n/0001"] = object()  # SGLang registered it at last
        await asyncio.wait_for(asyncio.gather(*runtime._late_aborts), 1.0)
        return answered, sent_before

    answered, sent_before = asyncio.run(scenario())
    assert answered is False  # not confirmed: the caller goes on
    assert sent_before == []
    assert aborted == ["p/n/0001"]  # sent once the rid was there
    assert runtime._calls["p/n/0001"].aborting  # nothing more delivered meanwhile


def test_an_aborted_stream_reports_what_the_engine_generated_after_the_abort() -> None:
    """SGLang stops a call at its next step: the tokens it generates meanwhile (and those
    produced but unread) never reach the reader, and the result still counts them
    (``produced_tokens``), so the caller can charge them as ghost tokens."""

    async def scenario() -> tuple[int, Any]:
        ticket = CallTicket("p/n/1", "p", "n", "t", arrival=0.0)
        stream = SGLangStream(GenerationRequest(ticket, "x", max_tokens=50))
        read = 0
        for produced in (1, 2, 3):
            stream.feed({"text": "a" * produced, "meta_info": {"completion_tokens": produced}})
        async for delta in stream:
            read += delta.tokens
            if read >= 2:
                break
        stream.begin_abort()  # the third token was produced, never read
        for produced in (4, 5):  # the engine's steps before it saw the abort
            stream.feed({"text": "a" * produced, "meta_info": {"completion_tokens": produced}})
        stream.meta["finish_reason"] = {"type": "abort"}
        stream.finish()
        return read, await stream.result()

    read, result = asyncio.run(scenario())
    assert read == 2
    assert result.finish_reason == "abort"
    assert result.output_tokens == 2  # what the reader got
    assert result.produced_tokens == 5
    assert result.generated_tokens == 5


def test_a_probe_whose_caller_stops_waiting_is_aborted() -> None:
    """``/ready`` bounds the health probe at 2 s; the probe waits up to 10 s. Cancelled, it
    stayed queued in the engine, one more for every later probe."""
    runtime: Any = object.__new__(SGLangRuntime)
    runtime.clock = lambda: 0.0
    runtime._calls = {}
    runtime._late_aborts = set()
    aborted: list[str] = []

    async def never_served(call: Any, kind: Any = None) -> None:
        await asyncio.Event().wait()

    async def abort(rid: str) -> bool:
        aborted.append(rid)
        return True

    runtime._pump = never_served
    runtime.abort = abort

    async def scenario() -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                await runtime._probe()
        await asyncio.wait_for(asyncio.gather(*runtime._late_aborts), 1.0)

    asyncio.run(scenario())
    assert len(aborted) == 1
    assert aborted[0].startswith("__probe__/")


def test_a_drained_engine_is_healthy_without_a_probe() -> None:
    """A drain admits no new call, a probe included: probing would only queue probes."""
    runtime: Any = object.__new__(SGLangRuntime)
    runtime.engine = object()
    runtime._procs = SimpleNamespace(alive=lambda: True)
    runtime._started_at = 0.0
    runtime._last_output = 0.0
    runtime.control = SimpleNamespace(state=SimpleNamespace(paused=True))
    runtime._gate = asyncio.Event()
    runtime._gate.set()

    async def no_probe() -> bool:
        raise AssertionError("probed while drained")

    runtime._probe = no_probe
    assert asyncio.run(runtime.healthy()) is True


def test_a_configured_state_folder_starts_without_an_earlier_engine_s_reports(
    tmp_path: Path,
) -> None:
    """A configured ``state_dir`` outlives its engine: the last run's status and markers, read
    as this engine's, passed the start-up check before its plugin ran and acknowledged control
    versions it never applied."""
    (tmp_path / "status.json").write_text('{"control_version": 50}')
    (tmp_path / "plugin-123.json").write_text("{}")
    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path), state_dir=tmp_path)
    assert runtime.read_status() is None
    assert not (tmp_path / "plugin-123.json").exists()


def _waiting_abort_chunk(rid: str, e2e_s: float) -> dict[str, Any]:
    """The one chunk SGLang 0.5.23 sends for a call it aborted in its waiting queue
    (``Scheduler.abort_request`` pops it and ``send_abort_output``s; the tokenizer manager's
    ``_handle_abort_req`` builds this): no ``prompt_tokens``, ``cached_tokens``,
    ``queue_time`` or ``num_retractions``, as no forward pass ran for it (as seen from the
    engine on CPU: ``tests/sglang/test_sglang_abort.py``)."""
    return {
        "text": "",
        "output_ids": [],
        "meta_info": {
            "id": rid,
            "finish_reason": {"type": "abort", "message": "Abort in waiting queue"},
            "weight_version": "default",
            "e2e_latency": e2e_s,
            "weight_versions": [{"version": "default", "start": 0, "end": 0}],
            "completion_tokens": 0,
            "response_sent_to_client_ts": 1.0e9 + e2e_s,
        },
        "prompt_token_ids": list(range(413)),
    }


def _stream(rid: str = "p/n/1") -> SGLangStream:
    pid, node, _ = rid.split("/")
    return SGLangStream(GenerationRequest(CallTicket(rid, pid, node, "t", 0.0), "x", 50))


def test_a_call_aborted_in_sglangs_waiting_queue_computed_nothing_and_only_waited() -> None:
    """Its queue time is all of its time in the engine (it was 0: none reported), its service
    none (it was all of it: attained service of a call that never ran), its prompt computed
    nothing."""
    stream = _stream()
    stream.submitted -= 2.0  # it waited 2 s
    stream.prompt_ids = list(range(413))  # what telemetry keeps of the chunk's prompt ids
    stream.begin_abort()  # as ``SGLangRuntime.abort`` does before asking SGLang
    stream.feed(_waiting_abort_chunk(stream.rid, 2.0))
    stream.finish()
    result = asyncio.run(stream.result())
    assert result.finish_reason == "abort"
    assert result.queue_s == result.e2e_s >= 2.0
    assert result.service_s == 0.0
    assert result.prefilled_tokens == 0
    assert result.computed_tokens == 0
    assert result.prompt_tokens == 413
    assert result.output_tokens == 0


def test_a_call_retracted_then_aborted_in_the_queue_keeps_its_last_forwards_figures() -> None:
    """A call that ran (prefilled, decoded) before a retraction put it back in the waiting
    queue computed its prompt: the abort's chunk, without figures, does not erase them."""
    stream = _stream()
    stream.submitted -= 3.0
    forward = {
        "prompt_tokens": 500,
        "cached_tokens": 100,
        "completion_tokens": 3,
        "num_retractions": 0,
        "finish_reason": None,
        wire.QUEUE_TIME_KEY: [0.5, None, None],
    }
    stream.feed({"text": "abc", "meta_info": forward})
    stream.feed({"text": "abc", "meta_info": {**forward, "num_retractions": 1}})
    stream.begin_abort()
    ended = _waiting_abort_chunk(stream.rid, 3.0)
    ended["meta_info"]["completion_tokens"] = 3
    stream.feed(ended)
    stream.finish()
    result = asyncio.run(stream.result())
    assert (result.prompt_tokens, result.cached_tokens) == (500, 100)
    assert result.prefilled_tokens is None
    assert result.computed_tokens == 400  # it was 0
    assert result.retractions == 1
    assert result.queue_s == 0.5
    assert result.service_s == pytest.approx(result.e2e_s - 0.5)
