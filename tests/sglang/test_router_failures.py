"""The ``sglang-router`` runtime when parts fail, without SGLang processes: ``/metrics`` with
no local metrics folder, a worker that stops answering, a prompt the workers refuse, a
preempt no worker carried out. Workers and the router are ``httpx.MockTransport`` answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.prometheus import PrometheusMetrics
from agentconsole.server.runtime.sglang.cluster.options import ClusterSettings
from agentconsole.server.runtime.sglang.cluster.runtime import RouterRuntime
from agentconsole.server.runtime.sglang.cluster.workers import Workers
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.status import Placement, RunningEntry, SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream

Handler = Callable[[httpx.Request], httpx.Response]


def _runtime(tmp_path: Path, workers: int = 2) -> RouterRuntime:
    """A router runtime that was never started (no tokenizer, no router)."""
    urls = tuple(f"http://w{i}" for i in range(workers))
    return RouterRuntime(EngineSettings(model_path=tmp_path), ClusterSettings("http://r", urls))


def _mock(workers: Workers, handler: Handler) -> None:
    """Every request of ``workers`` answered by ``handler``."""
    workers._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))


def _request(call_id: str = "p1/n1/1") -> GenerationRequest:
    ticket = CallTicket(call_id, "p1", "n1", "t1", arrival=0.0)
    return GenerationRequest(ticket, "hello", max_tokens=8, cache_namespace="t1")


def test_metrics_render_without_a_local_engine_folder(tmp_path: Path) -> None:
    """The workers write SGLang's metrics on their own hosts: a started router runtime names
    no folder, and ``/metrics`` still renders our series."""
    rt = _runtime(tmp_path)
    rt.engine = object()  # as once started
    assert rt.metrics_dir() is None
    text = PrometheusMetrics(MetricsAggregator(), rt.snapshot, dict).render()
    assert b"agentconsole_programs_created_total" in text
    asyncio.run(rt.workers._client.aclose())


def _worker_report(rid: str, version: int, program: str) -> dict[str, Any]:
    running = [RunningEntry(rid, program, "t1", 10, 1, 0.1)]
    status = SchedulerStatus(written_at=time.time(), control_version=version, running=running)
    placement = Placement(time.time(), {program: (100, 50)})
    return {"node": rid, "statuses": [status.to_json()], "placements": [placement.to_json()]}


def test_a_worker_that_stops_answering_counts_for_nothing(tmp_path: Path) -> None:
    """Its last report is not merged (no ghost call, its stale control version holds no
    acknowledgement back, no program is placed on it) until it answers again."""
    down: set[str] = set()
    versions = {"w0": 5, "w1": 1}

    def answer(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host in down:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=_worker_report(f"rid-{host}", versions[host], host))

    async def scenario() -> None:
        rt = _runtime(tmp_path)
        workers = rt.workers
        _mock(workers, answer)
        rt.engine = object()
        rt._calls["rid-w0"] = SGLangStream(_request("rid-w0"))  # a call waits for acks
        try:
            await workers.poll()
            status = rt.read_status()
            assert status is not None
            assert sorted(r.rid for r in status.running) == ["rid-w0", "rid-w1"]
            assert status.control_version == 1
            down.add("w1")
            await workers.poll()
            status = rt.read_status()
            assert status is not None
            assert [r.rid for r in status.running] == ["rid-w0"]
            assert status.control_version == 5
            assert await asyncio.wait_for(rt._ack(5), 1.0)
            assert workers.worker_of_call("rid-w1") is None
            assert workers.worker_of_program("w1") is None
            placement = rt.read_placement("w1")
            assert placement is not None
            assert "w1" not in placement.programs
            statuses = workers.statuses()  # ranks keep their places (telemetry's numbering)
            assert statuses[0] is not None
            assert statuses[1] is None
            down.clear()  # back: its fresh report counts again
            versions["w1"] = 0
            await workers.poll()
            status = rt.read_status()
            assert status is not None
            assert len(status.running) == 2
            assert workers.worker_of_program("w1") == 1
        finally:
            await workers._client.aclose()

    asyncio.run(scenario())


def test_context_length_is_the_smallest_the_workers_serve(tmp_path: Path) -> None:
    lengths = {"w0": 4096, "w1": 2048}

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/models"
        card = {"id": "default", "max_model_len": lengths[request.url.host]}
        return httpx.Response(200, json={"object": "list", "data": [card]})

    async def scenario() -> tuple[int | None, int | None]:
        workers = _runtime(tmp_path).workers
        _mock(workers, answer)
        try:
            both = await workers.context_length()
            lengths["w0"] = "x"  # type: ignore[assignment]  # a malformed answer is skipped
            lengths["w1"] = None  # type: ignore[assignment]
            return both, await workers.context_length()
        finally:
            await workers._client.aclose()

    assert asyncio.run(scenario()) == (2048, None)


def test_a_request_the_worker_refuses_ends_as_the_engines_own_abort(tmp_path: Path) -> None:
    """A 400 before the stream began ends the call with the worker's status and message (the
    service answers it as a client error); a 503 stays a failure (to retry)."""
    message = "The input (9000 tokens) is longer than the model's context length (8192 tokens)."
    status = {"code": 400}

    def answer(request: httpx.Request) -> httpx.Response:
        body = {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
        return httpx.Response(status["code"], json=body)

    async def scenario() -> None:
        rt = _runtime(tmp_path, workers=1)
        rt.engine = httpx.AsyncClient(base_url="http://r", transport=httpx.MockTransport(answer))
        try:
            result = await rt.submit(_request("p1/n1/1")).result()
            assert result.finish_reason == "abort"
            assert (result.engine_abort_status, result.engine_abort_message) == (400, message)
            status["code"] = 503
            with pytest.raises(RuntimeError, match="answered 503"):
                await rt.submit(_request("p1/n1/2")).result()
        finally:
            await rt.engine.aclose()
            await rt.workers._client.aclose()

    asyncio.run(scenario())


def _running_call(rt: RouterRuntime, rank: int | None) -> SGLangStream:
    call = SGLangStream(_request())
    call.first_at, call.rank = time.time(), rank
    rt._calls[call.rid] = call
    return call


def test_preempt_reports_false_when_no_worker_paused(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    posted: list[tuple[str, int | None]] = []

    async def post_all(path: str, body: dict[str, Any], *, only: int | None = None) -> list[bool]:
        posted.append((path, only))
        return [False, False]

    rt.workers.post_all = post_all  # type: ignore[method-assign]
    call = _running_call(rt, rank=None)
    assert asyncio.run(rt.preempt(call.rid)) is False
    assert call.rid not in rt.control.state.preempted  # the demotion is withdrawn
    assert posted == [("/pause_generation", None), ("/continue_generation", None)]
    asyncio.run(rt.workers._client.aclose())


def test_preempt_retracts_only_the_worker_running_the_call(tmp_path: Path) -> None:
    paths: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(f"{request.url.host}{request.url.path}")
        return httpx.Response(200, json={})

    async def scenario() -> bool:
        rt = _runtime(tmp_path)
        _mock(rt.workers, answer)
        call = _running_call(rt, rank=1)
        try:
            return await rt.preempt(call.rid)
        finally:
            await rt.workers._client.aclose()

    assert asyncio.run(scenario()) is True
    assert paths == ["w1/pause_generation", "w1/continue_generation"]
