"""An operator's preempt of a call an earlier preempt already requeued, without SGLang: the
plugin's own status (``PluginState.publish`` over a scheduler whose waiting queue holds the
retracted request, with its output so far) and the runtimes' ``preempt``.

A preempt used to count a call as running once it had streamed a token, so a call waiting
again after a preempt was "preempted" a second time: the answer listed it, the controller
requeued its node again, the whole running batch was retracted for nothing and the call's
demotion restarted (its starvation clock with it). It is not running: the answer says so.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import plugin_state, wire
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.cluster.options import ClusterSettings
from agentconsole.server.runtime.sglang.cluster.runtime import RouterRuntime
from agentconsole.server.runtime.sglang.control import STATUS_FILE, read_json
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.live_control import runs_now
from agentconsole.server.runtime.sglang.lockstep import Layout
from agentconsole.server.runtime.sglang.plugin_state import PluginState
from agentconsole.server.runtime.sglang.status import SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream

CALL_ID = "victim/n1/1"
STREAMED = 5  # tokens the call streamed before the earlier preempt retracted it


class _TokenizerManager:
    """SGLang's tokenizer manager as the preempt uses it: records the batch retractions."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def pause_generation(self, request: Any) -> None:
        self.sent.append(f"pause:{request.mode}")

    async def continue_generation(self, request: Any) -> None:
        self.sent.append("continue")


def _ticket() -> CallTicket:
    return CallTicket(CALL_ID, "victim", "n1", "t1", arrival=time.time())


def _stream(tokens: int) -> SGLangStream:
    """The runtime's stream of the call, having streamed ``tokens`` tokens."""
    call = SGLangStream(GenerationRequest(_ticket(), "keep talking", max_tokens=400))
    for n in range(1, tokens + 1):
        call.feed({"text": "a" * n, "meta_info": {"completion_tokens": n}})
    return call


def _sglang_request(output_tokens: int) -> Any:
    """SGLang's ``Req`` of the call as the plugin reads it, holding ``output_tokens``."""
    params = wire.encode(_ticket(), clock_offset=0.0)
    return SimpleNamespace(
        rid=CALL_ID,
        sampling_params=SimpleNamespace(custom_params=params),
        origin_input_ids=list(range(12)),
        output_ids=list(range(output_tokens)),
        extra_key=None,
        cache_salt=None,
        finished=lambda: False,
    )


def _publish(state_dir: Path, *, waiting: list[Any], running: list[Any]) -> SchedulerStatus:
    """The plugin's ``status.json`` over a scheduler holding ``waiting`` and ``running``."""
    plugin = PluginState(state_dir, Layout(tp_size=1, tp_rank=0))
    scheduler = SimpleNamespace(
        tree_cache=None,
        waiting_queue=waiting,
        running_batch=SimpleNamespace(reqs=running),
        last_batch=None,
        chunked_req=None,
    )
    plugin.publish(scheduler, time.time())
    return SchedulerStatus.from_json(read_json(state_dir / STATUS_FILE) or {})


def test_a_status_write_that_fails_still_forgets_requests_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = PluginState(tmp_path, Layout(tp_size=1, tp_rank=0))
    gone = _sglang_request(STREAMED)
    plugin.requests.seen_running(gone.rid, time.time())  # the plugin saw it run once
    assert gone.rid in plugin.requests.admitted

    def full_disk(path: Path, data: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plugin_state, "write_json_atomic", full_disk)
    empty = SimpleNamespace(
        tree_cache=None,
        waiting_queue=[],
        running_batch=SimpleNamespace(reqs=[]),
        last_batch=None,
        chunked_req=None,
    )
    with pytest.raises(OSError, match="No space left"):
        plugin.publish(empty, time.time())
    assert gone.rid not in plugin.requests.admitted  # forgotten all the same


def test_the_plugin_reports_the_output_a_requeued_call_holds(tmp_path: Path) -> None:
    status = _publish(tmp_path, waiting=[_sglang_request(STREAMED)], running=[])
    assert [(q.rid, q.generated) for q in status.queued] == [(CALL_ID, STREAMED)]


def test_a_second_preempt_of_a_requeued_call_answers_not_running(tmp_path: Path) -> None:
    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path), state_dir=tmp_path)
    manager = _TokenizerManager()
    runtime.engine = SimpleNamespace(tokenizer_manager=manager)
    call = _stream(STREAMED)
    runtime._calls[CALL_ID] = call
    # the earlier preempt: the call demoted, then retracted; it waits with what it streamed
    first_preempt_at = time.time() - 1.0
    runtime.control.state.preempted[CALL_ID] = first_preempt_at
    runtime.control.write()
    version = runtime.control.state.version
    _publish(tmp_path, waiting=[_sglang_request(STREAMED)], running=[])

    assert asyncio.run(runtime.preempt(CALL_ID)) is False
    assert manager.sent == []  # no batch retracted for it
    assert runtime.control.state.preempted[CALL_ID] == first_preempt_at  # its demotion stands
    assert runtime.control.state.version == version  # nothing written


def test_a_requeued_call_runs_again_once_it_streams_or_is_listed_running(tmp_path: Path) -> None:
    waiting = _publish(tmp_path, waiting=[_sglang_request(STREAMED)], running=[])
    assert not runs_now(_stream(STREAMED), waiting)
    # a token the status had not counted: admitted again after the status was written
    assert runs_now(_stream(STREAMED + 1), waiting)
    running = _publish(tmp_path, waiting=[], running=[_sglang_request(STREAMED + 3)])
    assert runs_now(_stream(STREAMED), running)  # its tokens since are still on the way
    # a call that never ran waits; one the status does not list yet runs once it streamed
    assert not runs_now(_stream(0), waiting)
    assert runs_now(_stream(1), None)
    assert not runs_now(_stream(0), None)


def test_the_router_runtime_does_not_preempt_a_requeued_call_again(tmp_path: Path) -> None:
    urls = ("http://w0",)
    runtime = RouterRuntime(EngineSettings(model_path=tmp_path), ClusterSettings("http://r", urls))
    posted: list[str] = []

    async def post_all(path: str, body: dict[str, Any], *, only: int | None = None) -> list[bool]:
        posted.append(path)
        return [True]

    runtime.workers.post_all = post_all  # type: ignore[method-assign]
    view = runtime.workers.views[0]
    view.reachable = True
    view.statuses = [_publish(tmp_path, waiting=[_sglang_request(STREAMED)], running=[])]
    call = _stream(STREAMED)
    call.rank = 0
    runtime._calls[CALL_ID] = call

    async def scenario() -> tuple[bool, bool]:
        try:
            again = await runtime.preempt(CALL_ID)
            call.feed({"text": "a" * 9, "meta_info": {"completion_tokens": STREAMED + 1}})
            resumed = await runtime.preempt(CALL_ID)  # admitted again: preempted
            return again, resumed
        finally:
            await runtime.workers._client.aclose()

    assert asyncio.run(scenario()) == (False, True)
    assert posted == ["/pause_generation", "/continue_generation"]  # the second preempt's
