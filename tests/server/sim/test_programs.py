"""A trace program as the simulator plays it: DAG bookkeeping, prompts and ideal E2E."""

from __future__ import annotations

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
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.programs import ProgramRun, build_contexts, program_node

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
