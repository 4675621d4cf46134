"""The SGLang runtime's ``context_of`` right after a program's call ends, before the plugin's
placement sweep has covered it: the context as the call left it (what it computed itself, its
cached prefix as shared), where it answered None and the driver's tool-wait decision found
nothing to keep (under load the sweep lags seconds, and the program's context was evicted
while it waited). A placement written after the call's end says what stayed resident."""

from __future__ import annotations

import time
from pathlib import Path

from agentconsole.scheduler.runtime import GenerationRequest, ProgramContext
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.control import (
    PLACEMENT_FILE,
    rank_file,
    write_json_atomic,
)
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.status import Placement
from agentconsole.server.runtime.sglang.stream import SGLangStream


def _place(tmp_path: Path, written_at: float, programs: dict[str, tuple[int, int]]) -> None:
    placement = Placement(written_at=written_at, programs=programs)
    write_json_atomic(tmp_path / rank_file(PLACEMENT_FILE, None), placement.to_json())
    time.sleep(0.25)  # past the reader's re-check interval (``RankFiles``: 0.2 s)


def _ended_call(runtime: SGLangRuntime, program_id: str) -> None:
    """A call of ``program_id`` that read 1,100 prompt tokens (1,000 cached) and wrote 40."""
    ticket = CallTicket(f"{program_id}/n1/1", program_id, "n1", "t", time.time(), 1)
    call = SGLangStream(GenerationRequest(ticket, "prompt", 40, cache_namespace="t"))
    call.meta = {"prompt_tokens": 1_100, "cached_tokens": 1_000}
    call.tokens = 40
    runtime._calls[call.rid] = call
    runtime._settle(call, None)


def test_a_call_that_ended_after_the_last_placement_is_its_programs_context(
    tmp_path: Path,
) -> None:
    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path), state_dir=tmp_path)
    _place(tmp_path, time.time() - 5.0, {"other": (500, 100)})
    assert runtime.context_of("p") is None
    _ended_call(runtime, "p")
    assert runtime.context_of("p") == ProgramContext(private_tokens=140, shared_tokens=1_000)
    # a sweep after the end knows better: what stayed resident, or that nothing did
    _place(tmp_path, time.time() + 1.0, {"p": (1_140, 600)})
    assert runtime.context_of("p") == ProgramContext(private_tokens=600, shared_tokens=540)
    _place(tmp_path, time.time() + 2.0, {})
    assert runtime.context_of("p") is None


def test_a_failed_call_leaves_no_context_to_decide_on(tmp_path: Path) -> None:
    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path), state_dir=tmp_path)
    _place(tmp_path, time.time() - 5.0, {})
    ticket = CallTicket("q/n1/1", "q", "n1", "t", time.time(), 1)
    call = SGLangStream(GenerationRequest(ticket, "prompt", 40, cache_namespace="t"))
    runtime._calls[call.rid] = call
    runtime._settle(call, RuntimeError("the engine failed the call"))
    assert runtime.context_of("q") is None
