"""Block composition: fused runs are as long as their steps, cuts land on step boundaries."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from agentconsole.kvtiers.node import Block
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sim.blocks import (
    BlockPlanner,
    first_step_ending_by,
    steps_within,
)
from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.costmodel import CostModel, preset

COST = preset("H200-141GB", "llama-3.1-8b", 1)


def _call(name: str, prompt: int, output: int, *, generated: int = 0) -> SimCall:
    ticket = CallTicket(
        call_id=f"p-{name}/n/0000",
        program_id=f"p-{name}",
        node_id="n",
        tenant="t",
        arrival=0.0,
        prompt_tokens=prompt,
        expected_output_tokens=output,
    )
    call = SimCall(ticket, [Block(("prompt", name), prompt)], output, ("out", name))
    call.generated = generated
    call.prefill_left = prompt
    return call


@given(step=st.floats(0.001, 1.0), steps=st.integers(1, 200), span=st.floats(0.0, 300.0))
def test_step_searches_agree_with_a_linear_scan(step: float, steps: int, span: float) -> None:
    def seconds(k: int) -> float:
        return k * step

    within = max([k for k in range(1, steps + 1) if seconds(k) <= span], default=1)
    ending = min([k for k in range(1, steps + 1) if seconds(k) >= span], default=steps)
    assert steps_within(seconds, steps, span) == within
    assert first_step_ending_by(seconds, steps, span) == ending


def test_decode_run_stops_at_the_first_call_to_finish_and_at_the_horizon() -> None:
    planner = BlockPlanner(COST, EngineConfig(max_fused_decode_steps=64))
    calls = [_call("a", 1000, 50, generated=10), _call("b", 2000, 500, generated=10)]
    context = sum(c.prompt_tokens + c.generated for c in calls)
    block = planner.decode_run(0.0, float("inf"), calls, context)
    assert block.decode_steps == 40  # call a has 40 tokens left
    assert block.duration == COST.decode_steps_seconds(2, context, 40)

    horizon = COST.decode_steps_seconds(2, context, 7) + 1e-9
    cut = planner.decode_run(0.0, horizon, calls, context)
    assert cut.decode_steps == 7
    assert cut.end <= horizon


def test_cut_shortens_a_decode_run_to_the_step_in_flight() -> None:
    planner = BlockPlanner(COST, EngineConfig())
    calls = [_call("a", 4000, 1000, generated=1)]
    block = planner.decode_run(10.0, float("inf"), calls, 4001)
    assert block.decode_steps == 64
    one = COST.decode_steps_seconds(1, 4001, 1)
    assert planner.cut(block, 10.0 + 2.5 * one)
    assert block.decode_steps == 3
    assert block.end >= 10.0 + 2.5 * one
    assert not planner.cut(block, block.end)  # nothing left to cut


def test_a_stall_free_run_hides_prefill_under_decode_and_can_be_cut() -> None:
    planner = BlockPlanner(COST, EngineConfig())
    decoding = [_call("d", 8000, 2000, generated=1)]
    prompt = _call("p", 60_000, 100)
    context = 8001
    block = planner.stall_free_run(0.0, float("inf"), [prompt], decoding, context)
    assert block.chunk > 0
    assert block.decode_steps > 1
    assert block.prefill == [(prompt, block.chunk * block.decode_steps)]
    # the first step is at most 10% longer than the decode step alone; later steps grow as
    # the prompt's computed context does (a fixed budget per run, as in Sarathi-Serve)
    first = planner.stall_free_run(0.0, 1e-9, [prompt], decoding, context)
    assert first.decode_steps == 1
    assert first.duration <= 1.1 * COST.decode_step_seconds(1, context) + 1e-12
    assert block.duration > block.decode_steps * first.duration
    steps = block.decode_steps
    assert planner.cut(block, block.duration / 2)
    assert 1 <= block.decode_steps < steps
    assert block.prefill == [(prompt, block.chunk * block.decode_steps)]


def test_a_prefill_step_serves_the_best_ranked_prompt_first() -> None:
    planner = BlockPlanner(COST, EngineConfig(chunked_prefill_size=5000))
    late, urgent = _call("late", 8000, 10), _call("urgent", 3000, 10)
    late.rank, urgent.rank = (1, 0.0, 0), (0, 0.0, 0)
    block = planner.prefill_step(0.0, [late, urgent], [], 0, 5000)
    assert block.prefill == [(urgent, 3000), (late, 2000)]
    assert block.tokens == 5000


def test_a_large_fixed_prefill_cost_does_not_collapse_the_stall_free_budget() -> None:
    """On a CPU engine the fixed cost of a prefill step exceeds a tenth of a decode step;
    the budget must still let a prompt through in a few steps, not one token per step."""
    cpu = CostModel.from_profile("cpu-2core__tiny-llama__tp1")
    slow_launch = replace(cpu.efficiency, prefill_overhead_s=10 * cpu.decode_step_seconds(4, 4000))
    cost = CostModel(cpu.gpu, cpu.model, cpu.tp, slow_launch)
    planner = BlockPlanner(cost, EngineConfig(chunked_prefill_size=4096))
    decoding = [_call(f"d{i}", 1000, 500, generated=1) for i in range(4)]
    block = planner.stall_free_run(0.0, float("inf"), [_call("p", 1600, 10)], decoding, 4004)
    assert block.chunk >= 64  # tokens per step
