"""The runtime over several models (``server/runtime/fleet``) on its own, over two simulated
engines: submit goes to the request's model, abort and cache hints to the engine holding the
call or the program, memory and snapshots are summed with each model's tiers shown apart,
and the settings' one-model list builds the plain runtime."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentconsole.scheduler.events import Event, EventKind, EventLog, Scalar
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.models import ServedModel
from agentconsole.scheduler.runtime import CacheAction, GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.fleet.build import ModelSink, build_runtime, member_options
from agentconsole.server.runtime.fleet.runtime import FleetRuntime
from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sim.live import SimLiveRuntime

MODELS = (
    ServedModel("big", source="llama-3.1-70b", tier=2, tp=4),
    ServedModel("small", source="llama-3.1-8b", tier=1),
)
PROMPT = "a shared context for the fleet " * 40


def _request(call_id: str, model: str | None, tokens: int = 8) -> GenerationRequest:
    pid, node, attempt = call_id.split("/")
    ticket = CallTicket(call_id, pid, node, "t", time.time(), int(attempt))
    prompt = f"{pid}: {PROMPT}"  # each program's own context
    return GenerationRequest(
        ticket, prompt, tokens, cache_namespace="t", forced_output_tokens=tokens, model=model
    )


def _fleet(scale: float, sink: EventLog | None = None) -> FleetRuntime:
    extra: dict[str, object] = {"time_scale": scale}
    if sink is not None:
        extra["event_sink"] = sink
    fleet = build_runtime("sim", RuntimeOptions(extra=extra), MODELS)
    assert isinstance(fleet, FleetRuntime)
    return fleet


def test_calls_run_on_their_model_and_programs_are_remembered() -> None:
    async def scenario() -> None:
        log = EventLog()
        fleet = _fleet(0.0, log)
        await fleet.start()
        assert fleet.loaded("big")
        assert fleet.loaded("small")
        results = await asyncio.gather(
            fleet.submit(_request("p1/n1/1", "big")).result(),
            fleet.submit(_request("p2/n1/1", "small")).result(),
            fleet.submit(_request("p3/n1/1", None)).result(),  # the default: the first model
        )
        assert all(r.output_tokens == 8 for r in results)
        assert fleet.models_of("p1") == ["big"]
        assert fleet.models_of("p2") == ["small"]
        assert fleet.models_of("p3") == ["big"]
        fleet.submit(_request("p2/n2/1", "big"))
        assert fleet.models_of("p2") == ["small", "big"]  # the latest last
        # each engine holds only its own calls' prompts
        small, big = fleet.member("small"), fleet.member("big")
        p1 = small.chat_format.encode(f"p1: {PROMPT}")
        assert big.probe("p1", p1, "t").cached_tokens > 0
        assert small.probe("p1", p1, "t").cached_tokens == 0
        assert fleet.probe("p1", p1, "t").cached_tokens > 0  # the program's latest model
        with pytest.raises(KeyError):
            fleet.submit(_request("p4/n1/1", "medium"))
        await fleet.stop()
        stats = [e for e in log.events if e.kind is EventKind.ENGINE_STATS]
        assert {e.data["model"] for e in stats} == {"big", "small"}
        assert all(str(e.data["engine"]).startswith(f"{e.data['model']}/") for e in stats)

    asyncio.run(scenario())


def test_abort_cache_hint_memory_and_snapshot() -> None:
    async def scenario() -> None:
        fleet = _fleet(1.0)
        await fleet.start()
        small = fleet.member("small")
        assert isinstance(small, SimLiveRuntime)
        stream = fleet.submit(_request("p1/n1/1", "small", tokens=4000))
        await asyncio.sleep(0.05)
        snap = fleet.snapshot()
        ids = {c.call_id for c in snap.queued} | {c.call_id for c in snap.running}
        assert ids == {"p1/n1/1"}
        assert {"hbm", "hbm.big", "hbm.small"} <= set(snap.tiers)
        assert snap.tiers["hbm"].capacity_tokens == (
            snap.tiers["hbm.big"].capacity_tokens + snap.tiers["hbm.small"].capacity_tokens
        )
        memory = fleet.memory()
        parts = [fleet.member(n).memory() for n in ("big", "small")]
        assert memory.hbm_capacity_tokens == sum(p.hbm_capacity_tokens for p in parts)
        assert memory.queued_calls + memory.running_calls == 1
        assert await fleet.abort("p1/n1/1")  # on the engine holding it
        assert (await stream.result()).finish_reason == "abort"
        assert not await fleet.abort("p1/n1/1")
        assert not await fleet.abort("nobody/n/1")  # unknown: asked of every engine
        done = await fleet.submit(_request("p2/n1/1", "small")).result()
        assert done.finish_reason == "length"
        assert fleet.context_of("p2") is not None
        await fleet.cache_hint("p2", CacheAction.RECOMPUTE, 0.0)
        assert fleet.context_of("p2") is None  # dropped where it was
        await fleet.stop()

    asyncio.run(scenario())


def test_a_programs_end_reaches_the_models_that_ran_it() -> None:
    async def scenario() -> None:
        fleet = _fleet(0.0)
        await fleet.start()
        ended: dict[str, list[str]] = {"big": [], "small": []}
        for name, seen in ended.items():
            fleet.member(name).program_ended = seen.append  # type: ignore[method-assign,assignment]
        await fleet.submit(_request("p1/n1/1", "small")).result()
        fleet.program_ended("p1")
        assert ended == {"big": [], "small": ["p1"]}
        fleet.program_ended("never-ran")  # unknown: told to every model
        assert ended == {"big": ["never-ran"], "small": ["p1", "never-ran"]}
        await fleet.stop()

    asyncio.run(scenario())


def test_one_model_builds_the_plain_runtime_and_members_get_their_options() -> None:
    plain = build_runtime("sim", RuntimeOptions(model="llama-3.1-8b"), MODELS[1:])
    assert isinstance(plain, SimLiveRuntime)
    base = RuntimeOptions(tp=1, extra={"engine_log": "/x/serve.sglang.log", "state_dir": "/s"})
    big = member_options(
        "sglang", base, ServedModel("big", "/m/big", tokenizer="/t", devices=(2, 3))
    )
    assert big.model == "/m/big"
    assert big.tp == 2
    assert big.extra["engine_log"] == "/x/serve.sglang.big.log"
    assert big.extra["state_dir"] == "/s/big"
    assert big.extra["engine_args"] == {"tokenizer_path": "/t", "base_gpu_id": 2}
    alone = member_options("sglang", base, ServedModel("only", "/m"), alone=True)
    assert alone.extra["engine_log"] == "/x/serve.sglang.log"  # as a one-model serve's
    with pytest.raises(ValueError, match="two or more"):
        FleetRuntime(MODELS[:1], {"big": plain})


def test_model_sink_names_engine_stats_only() -> None:
    log = EventLog()
    fleet_sink = member_options("sim", RuntimeOptions(extra={"event_sink": log}), MODELS[1])
    sink = fleet_sink.extra["event_sink"]
    sink.emit(Event(1.0, EventKind.ENGINE_STATS, data={"engine": "0", "busy_s": 1.0}))
    sink.emit(Event(1.0, EventKind.KV_DROPPED, "p", data={"tokens": 3}))
    assert log.events[0].data == {"engine": "small/0", "model": "small", "busy_s": 1.0}
    assert log.events[1].data == {"tokens": 3}


def test_model_sink_keeps_each_data_parallel_rank_of_a_model_apart() -> None:
    """Two ranks of one model report as two engines: their busy seconds add up, in the
    cluster's total and the model's."""
    metrics, log = MetricsAggregator(), EventLog(keep=False)
    log.subscribe(metrics.observe)
    sink = ModelSink(log, "big")
    for rank, busy in ((0, 1.0), (1, 2.0)):
        data: dict[str, Scalar] = {"engine": f"sglang.rank{rank}", "busy_s": busy}
        sink.emit(Event(1.0, EventKind.ENGINE_STATS, data=data))
    assert metrics.busy_s == 3.0
    assert metrics.models()["big"]["gpu_s"] == 3.0
