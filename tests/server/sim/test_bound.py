"""The throughput bound: what it counts, and that no simulated schedule ever beats it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentconsole.sample_traces.format import Branch, LLMNode, PrefixSegment, TraceProgram
from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.events import EventKind
from agentconsole.server.runtime.sim.bound import throughput_bound
from agentconsole.server.runtime.sim.costmodel import attention_pairs, preset
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

COST = preset("H200-141GB", "llama-3.1-8b", 1)


def _program(
    pid: str, tenant: str = "t", *, public: bool = True, nodes: tuple[LLMNode, ...] = ()
) -> TraceProgram:
    return TraceProgram(
        id=pid,
        tenant=tenant,
        workload="test",
        shape="test",
        arrival_s=0.0,
        prefix=(PrefixSegment(id="system", tokens=10_000, public=public),),
        nodes=nodes or (LLMNode(id="a", prompt_tokens=1_000, output_tokens=11),),
    )


def test_one_call_needs_its_prefill_and_its_decode_reads() -> None:
    bound = throughput_bound([_program("p")], COST)
    expected = COST.work_floor_seconds(
        11_000,
        attention_pairs(10_000, 0) + attention_pairs(1_000, 10_000),
        10,
        # ten decode steps after the first token, the k-th reading 11,000 + k tokens of KV
        sum(11_000 + k for k in range(1, 11)),
    )
    assert (bound.compute_s, bound.memory_s) == pytest.approx(expected)
    assert bound.programs_per_s == pytest.approx(1 / max(expected))


def test_shared_context_counts_once_and_only_where_the_engine_shares_it() -> None:
    one = throughput_bound([_program("p")], COST)
    public = throughput_bound([_program("p"), _program("q", "u")], COST)
    private_two_tenants = throughput_bound(
        [_program("p", public=False), _program("q", "u", public=False)], COST
    )
    private_one_tenant = throughput_bound(
        [_program("p", public=False), _program("q", public=False)], COST
    )
    # a public prefix under a call's own prompt is the tenant's (SGLang salts every key of a
    # prompt not public as a whole): computed once per tenant, as a private one
    assert public.compute_s == pytest.approx(private_two_tenants.compute_s)
    assert private_two_tenants.compute_s == pytest.approx(2 * one.compute_s)
    assert private_one_tenant.compute_s < 2 * one.compute_s
    # a call made of the public prefix alone shares it across tenants
    prefix_only = (LLMNode(id="a", prompt_tokens=0, output_tokens=11),)
    alone = throughput_bound([_program("p", nodes=prefix_only)], COST)
    two_tenants = [_program("p", nodes=prefix_only), _program("q", "u", nodes=prefix_only)]
    assert throughput_bound(two_tenants, COST).compute_s < 2 * alone.compute_s


def test_cancelled_programs_and_discarded_branches_need_nothing() -> None:
    spare = LLMNode(id="spare", parents=("a",), prompt_tokens=500, output_tokens=50)
    base = _program("p", nodes=(LLMNode(id="a", prompt_tokens=1_000, output_tokens=11),))
    with_discarded = replace(base, nodes=(*base.nodes, replace(spare, branch=Branch.DISCARDED)))
    cancelled = replace(_program("c", "u"), cancel_at_s=1.0)
    bound = throughput_bound([with_discarded, cancelled], COST)
    alone = throughput_bound([base], COST)
    assert bound.programs == 1
    assert (bound.compute_s, bound.memory_s) == pytest.approx((alone.compute_s, alone.memory_s))
    with_spare = replace(base, nodes=(*base.nodes, spare))
    assert throughput_bound([with_spare], COST).compute_s > alone.compute_s


@pytest.mark.parametrize("workload", ["seed-mix", "wide-fanout"])
@pytest.mark.parametrize(("policy", "kv_policy"), [("fcfs", "keep"), ("cp-cache", "adaptive")])
def test_no_simulated_schedule_needs_less_engine_time_than_the_bound(
    workload: str, policy: str, kv_policy: str
) -> None:
    # heavy load, so batches are large and prefill overlaps decode as much as it ever does
    programs = generate(workload, n_programs=40, rate=1.0, seed=3)
    result = Simulation(programs, COST, SimConfig(policy=policy, kv_policy=kv_policy)).run()
    finished = {e.program_id for e in result.events.events if e.kind is EventKind.PROGRAM_FINISHED}
    assert len(finished) > 20
    bound = throughput_bound([p for p in programs if p.id in finished], COST)
    busy = sum(engine.busy_s for engine in result.engines)
    floor = max(bound.compute_s, bound.memory_s)
    assert busy >= floor
    if workload == "seed-mix" and policy != "fcfs":
        # not vacuous: a loaded engine spends about twice the floor (per-step weight reads,
        # prefill that decode cannot hide). wide-fanout's floor is far lower: it leaves out
        # the discarded branches that make up most of its work; fcfs, with no program door,
        # thrashes at this load (its busy time is ~4x the floor, mostly recompute)
        assert floor >= 0.35 * busy
