"""Cross-model KV in the simulator: lost reuse counted exactly, shared prefill charged exactly.

A hand-made program: a planner call on model A, then a verify call on model B whose prompt
starts with everything A cached (the prefix, the planner's prompt and its answer)."""

from __future__ import annotations

import math

import pytest

from agentconsole.sample_traces.format import LLMNode, PrefixSegment, TraceProgram
from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.server.runtime.sim.calls import EngineConfig
from agentconsole.server.runtime.sim.crossmodel import (
    NONE,
    SHARED_PREFILL,
    CrossModelKv,
    ForeignKv,
    get_cross_model,
)
from agentconsole.server.runtime.sim.hardware import model, shared_kv_layers
from agentconsole.server.runtime.sim.models import ModelSetup, parse_models
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

BASE, TUNED, LARGE = "llama-3.1-8b", "llama-3.1-8b-verify", "llama-3.1-70b"
PREFIX, PLAN_PROMPT, PLAN_OUT, VERIFY_PROMPT, VERIFY_OUT = 2000, 1000, 100, 500, 50
#: what model A holds when the verify call is placed: prefix, planner prompt and answer
CACHED_ON_A = PREFIX + PLAN_PROMPT + PLAN_OUT


def _program(a: str, b: str) -> TraceProgram:
    return TraceProgram(
        id="p0",
        tenant="t",
        workload="hand",
        shape="two-models",
        arrival_s=0.0,
        prefix=(PrefixSegment(id="p0/sys", tokens=PREFIX),),
        nodes=(
            LLMNode(
                id="plan",
                prompt_tokens=PLAN_PROMPT,
                output_tokens=PLAN_OUT,
                role="planner",
                candidates=(a,),
            ),
            LLMNode(
                id="check",
                parents=("plan",),
                prompt_tokens=VERIFY_PROMPT,
                output_tokens=VERIFY_OUT,
                role="verify",
                candidates=(b,),
            ),
        ),
    )


def _run(models: str, a: str, b: str, mode: CrossModelKv) -> tuple[dict[str, Event], Simulation]:
    pools = parse_models(models)
    config = SimConfig(models=ModelSetup(pools), engine=EngineConfig(cross_model=mode))
    sim = Simulation([_program(a, b)], pools[0].cost(), config)
    result = sim.run()
    ends = {e.node_id: e for e in result.events.events if e.kind is EventKind.CALL_FINISHED}
    assert set(ends) == {"plan", "check"}
    assert (ends["plan"].data["model"], ends["check"].data["model"]) == (a, b)
    return ends, sim


def _seconds(event: Event, key: str) -> float:
    value = event.data[key]
    assert isinstance(value, float)
    return value


def test_presets_declare_which_layers_share_kv() -> None:
    base, tuned, large = model(BASE), model(TUNED), model(LARGE)
    assert shared_kv_layers(base, tuned) == shared_kv_layers(tuned, base) == 16
    assert shared_kv_layers(base, base) == 32
    assert shared_kv_layers(base, large) == shared_kv_layers(tuned, large) == 0
    assert get_cross_model("shared-prefill") is SHARED_PREFILL
    with pytest.raises(ValueError, match="unknown cross-model KV mode"):
        get_cross_model("blend")
    with pytest.raises(ValueError, match="compatible_tokens"):
        ForeignKv(cached_tokens=1, compatible_tokens=2)


def test_without_sharing_the_other_models_prefix_is_lost_reuse() -> None:
    ends, sim = _run(f"{BASE},{TUNED}", BASE, TUNED, NONE)
    plan, check = ends["plan"].data, ends["check"].data
    assert check["prompt_tokens"] == CACHED_ON_A + VERIFY_PROMPT
    assert check["cached_tokens"] == 0  # model B never saw the program
    assert check["computed_tokens"] == CACHED_ON_A + VERIFY_PROMPT
    assert check["cross_model_lost_tokens"] == CACHED_ON_A
    assert check["cross_model_reused_tokens"] == check["cross_model_recompute_tokens"] == 0
    # the first call found nothing anywhere
    assert plan["cross_model_lost_tokens"] == plan["cross_model_reused_tokens"] == 0
    metrics = MetricsAggregator().observe_all(sim.log.events).report()
    assert metrics["cross_model_lost_tokens"] == CACHED_ON_A
    assert metrics["cross_model_reused_tokens"] == 0


def test_shared_prefill_reuses_the_shared_layers_and_recomputes_the_rest() -> None:
    ends, _ = _run(f"{BASE},{TUNED}", BASE, TUNED, SHARED_PREFILL)
    check = ends["check"].data
    recompute = math.ceil(CACHED_ON_A * (32 - 16) / 32)
    assert check["cross_model_reused_tokens"] == CACHED_ON_A
    assert check["cross_model_recompute_tokens"] == recompute
    assert check["cross_model_lost_tokens"] == 0
    assert check["computed_tokens"] == VERIFY_PROMPT + recompute
    # the shared layers' KV (and the activations the recompute starts from) came over the link
    assert _seconds(ends["check"], "restore_s") > 0
    none, _ = _run(f"{BASE},{TUNED}", BASE, TUNED, NONE)
    assert _seconds(ends["check"], "service_s") < _seconds(none["check"], "service_s")


def test_shared_prefill_buys_nothing_between_incompatible_models() -> None:
    ends, _ = _run(f"{LARGE}:tp4,{BASE}", LARGE, BASE, SHARED_PREFILL)
    check = ends["check"].data
    assert check["cross_model_lost_tokens"] == CACHED_ON_A
    assert check["cross_model_reused_tokens"] == 0
    assert check["computed_tokens"] == CACHED_ON_A + VERIFY_PROMPT


def test_one_model_runs_carry_no_cross_model_fields() -> None:
    pools = parse_models(BASE)
    sim = Simulation([_program(BASE, BASE)], pools[0].cost(), SimConfig())
    result = sim.run()
    ends = [e for e in result.events.events if e.kind is EventKind.CALL_FINISHED]
    assert ends
    assert all("cross_model_lost_tokens" not in e.data for e in ends)
