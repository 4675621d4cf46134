"""A trace program as the simulator plays it: DAG bookkeeping, prompts and ideal E2E."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentconsole.sample_traces.format import (
    LLMNode,
    Outcome,
    PrefixSegment,
    ToolAttempt,
    ToolKind,
    ToolNode,
    TraceProgram,
)
from agentconsole.scheduler.program import NodeKind
from agentconsole.server.runtime.sim.costmodel import CostModel, preset
from agentconsole.server.runtime.sim.programs import ProgramRun, build_contexts, program_node
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

COST = preset("H200-141GB", "llama-3.1-8b", 1)


def _tool(node_id: str, name: str, latency_s: float) -> ToolNode:
    return ToolNode(
        id=node_id,
        parents=("plan",),
        tool=name,
        tool_kind=ToolKind.TEST_RUN,
        timeout_s=30.0,
        result_tokens=400,
        attempts=(ToolAttempt(latency_s=latency_s, outcome=Outcome.OK),),
    )


def _program() -> TraceProgram:
    """plan -> (test | lint) -> fix: a fan-out of two tools joined by one call."""
    return TraceProgram(
        id="p",
        tenant="t",
        workload="unit",
        shape="fanout",
        arrival_s=0.0,
        prefix=(PrefixSegment(id="p/task", tokens=10_000),),
        nodes=(
            LLMNode(id="plan", prompt_tokens=200, output_tokens=100),
            _tool("test", "pytest", 4.0),
            _tool("lint", "ruff", 1.0),
            LLMNode(id="fix", parents=("test", "lint"), prompt_tokens=300, output_tokens=50),
        ),
    )


def test_a_run_knows_its_roots_children_and_joins() -> None:
    run = ProgramRun.of(_program())
    assert run.waiting_parents == [0, 1, 1, 2]
    assert run.children == [[1, 2], [3], [3], []]
    assert run.needed == 4


def test_contexts_grow_along_the_dag_and_ideal_e2e_follows_the_slowest_branch() -> None:
    run = ProgramRun.of(_program())
    ideal = build_contexts(run, COST, 8192)
    plan, fix = run.contexts["plan"], run.contexts["fix"]
    assert [b.key for b in plan] == ["p/task", "p/plan/prompt"]
    # the join sees the task, the plan, its output and both tool results, then its own prompt
    assert [b.key for b in fix][:3] == ["p/task", "p/plan/prompt", "p/plan/out"]
    assert {"p/test/result", "p/lint/result"} <= {b.key for b in fix}
    assert fix[-1].key == "p/fix/prompt"
    assert sum(b.tokens for b in fix) == 10_000 + 200 + 100 + 400 + 400 + 300
    # the slowest tool (4 s) is on the critical path, plus two calls' GPU time
    assert 4.0 < ideal < 4.0 + 2.0


def test_program_nodes_carry_no_recorded_outcome() -> None:
    trace = _program()
    test = program_node("p", trace.nodes[1])
    assert test.kind is NodeKind.TOOL
    assert test.tool is not None
    assert test.tool.name == "pytest"
    assert program_node("p", trace.nodes[0]).kind is NodeKind.LLM


def test_call_overhead_delays_each_llm_call_on_the_path_once() -> None:
    """``call_overhead_s`` is time outside engine steps: a program alone gets slower by one
    overhead per LLM call on its critical path (plan and fix), in the ideal E2E and in the
    simulation alike, and the engine's own busy time does not change."""
    slow = CostModel(COST.gpu, COST.model, 1, replace(COST.efficiency, call_overhead_s=0.25))
    ideal = build_contexts(ProgramRun.of(_program()), COST, 8192)
    ideal_slow = build_contexts(ProgramRun.of(_program()), slow, 8192)
    assert ideal_slow == pytest.approx(ideal + 2 * 0.25)
    e2e = {}
    for name, cost in (("base", COST), ("slow", slow)):
        result = Simulation([_program()], cost, SimConfig(policy="fcfs")).run()
        program = result.controller.programs["p"]
        assert program.finished_at is not None
        e2e[name] = program.finished_at - program.created_at
    assert e2e["slow"] == pytest.approx(e2e["base"] + 2 * 0.25, abs=1e-6)


def test_ideal_e2e_is_the_programs_run_alone_its_own_context_prefilled() -> None:
    """The slowdown's denominator: a program alone on an engine that holds what it shares
    with other programs (the platform's and its tenant's prefix, left by a warm-up program of
    the tenant) but not its own task context, which no engine holds when it arrives (it read
    1.4x for a seed-mix program alone when that was counted cached)."""
    shared = (
        PrefixSegment(id="platform/agent-system", tokens=6_000, public=True),
        PrefixSegment(id="t/profile", tokens=2_000),
    )
    warm = replace(_program(), id="w", prefix=(*shared, PrefixSegment(id="w/task", tokens=10_000)))
    alone = replace(
        _program(), arrival_s=600.0, prefix=(*shared, PrefixSegment(id="p/task", tokens=10_000))
    )
    ideal = build_contexts(ProgramRun.of(alone), COST, 8192)
    for programs in ([alone], [warm, alone]):
        result = Simulation(programs, COST, SimConfig(policy="fcfs")).run()
        program = result.controller.programs["p"]
        assert program.finished_at is not None
        e2e = program.finished_at - program.created_at
        if len(programs) == 2:  # warm: the shared prefix cached, as the ideal takes it
            assert e2e == pytest.approx(ideal, rel=1e-3)
        else:  # cold: the shared prefix is prefilled too
            assert e2e > ideal
