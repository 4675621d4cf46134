"""The simulator plays ``long-coding``: compact calls get fresh contexts, sessions finish."""

from __future__ import annotations

from collections import Counter

import pytest

from agentconsole.sample_traces.format import (
    LLMNode,
    PrefixSegment,
    TraceProgram,
    context_segments,
)
from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.events import EventKind
from agentconsole.server.runtime.sim.costmodel import CostModel, preset
from agentconsole.server.runtime.sim.hardware import model
from agentconsole.server.runtime.sim.programs import ProgramRun, build_contexts
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

MODEL = "qwen2.5-7b-1m"
COST = preset("H200-141GB", MODEL, 1)
ENDS = {EventKind.PROGRAM_FINISHED, EventKind.PROGRAM_FAILED, EventKind.PROGRAM_CANCELLED}


def _small_sessions() -> list[TraceProgram]:
    """Short sessions under Claude Code's 200K window: they compact and spawn subagents soon."""
    return generate(
        "long-coding",
        n_programs=8,
        rate=0.05,
        seed=5,
        steps_median=60.0,
        steps_sigma=0.3,
        max_steps=90,
        window_tokens=200_000,
        p_cancel=0.0,
    )


def test_the_long_context_preset_holds_every_long_coding_context() -> None:
    window = model(MODEL).context_window
    assert window is not None
    assert window >= 400_000  # the workload's default window
    assert (model("llama-3.1-8b").context_window or 0) < 400_000
    assert COST.kv_bytes_per_token == 28 * 4 * 128 * 2 * 2


def test_simulator_prompts_follow_the_context_rule_through_compactions() -> None:
    programs = _small_sessions()
    compact = [n for p in programs for n in p.nodes if isinstance(n, LLMNode) and n.compact]
    assert len(compact) >= 8  # subagent starts and compactions both occur
    for program in programs:
        run = ProgramRun.of(program)
        build_contexts(run, COST, 8192)
        for node in program.nodes:
            if isinstance(node, LLMNode):
                rule = [(s.key, s.tokens) for s in context_segments(program, node.id) if s.tokens]
                assert [(b.key, b.tokens) for b in run.contexts[node.id]] == rule


def _summary_then(compact: bool) -> TraceProgram:
    """150K of work, an 8K summary of it, then a 50K continuation (compact or not)."""
    return TraceProgram(
        id="p",
        tenant="t",
        workload="unit",
        shape="serial",
        arrival_s=0.0,
        prefix=(PrefixSegment(id="sys", tokens=16_000, public=True),),
        nodes=(
            LLMNode(id="work", prompt_tokens=150_000, output_tokens=10),
            LLMNode(id="summary", parents=("work",), prompt_tokens=1_000, output_tokens=8_000),
            LLMNode(
                id="go",
                parents=("summary",),
                prompt_tokens=50_000,
                output_tokens=1,
                compact=compact,
            ),
        ),
    )


class _Recording(CostModel):
    """The cost model, noting the (new, cached) tokens of every prefill it prices."""

    __slots__ = ("prefills",)

    def __init__(self, base: CostModel) -> None:
        super().__init__(base.gpu, base.model, base.tp, base.efficiency)
        self.prefills: list[tuple[int, int]] = []

    def prefill_seconds(
        self, new_tokens: int, cached_tokens: int = 0, chunk_tokens: int = 0
    ) -> float:
        self.prefills.append((new_tokens, cached_tokens))
        return super().prefill_seconds(new_tokens, cached_tokens, chunk_tokens)


@pytest.mark.parametrize(
    ("compact", "go_context", "go_prefill"),
    [
        # the summary is read again after the prefix, so it is prefilled again with the prompt
        (True, 16_000 + 8_000 + 50_000, (8_000 + 50_000, 16_000)),
        # without compaction the whole history stays cached and only the prompt is new
        (False, 16_000 + 150_000 + 10 + 1_000 + 8_000 + 50_000, (50_000, 175_010)),
    ],
)
def test_ideal_prefill_of_a_compaction_rereads_the_summary(
    compact: bool, go_context: int, go_prefill: tuple[int, int]
) -> None:
    cost = _Recording(COST)
    run = ProgramRun.of(_summary_then(compact))
    build_contexts(run, cost, 8192)
    assert sum(b.tokens for b in run.contexts["go"]) == go_context
    assert cost.prefills[-1] == go_prefill


@pytest.mark.parametrize("policy", ["fcfs", "cp-cache"])
def test_a_few_sessions_run_to_completion(policy: str) -> None:
    programs = _small_sessions()
    result = Simulation(programs, COST, SimConfig(policy=policy)).run()
    ends = Counter(e.kind for e in result.events if e.kind in ENDS)
    assert ends[EventKind.PROGRAM_FINISHED] == len(programs)
    calls = sum(isinstance(n, LLMNode) for p in programs for n in p.nodes)
    finished = sum(e.kind is EventKind.CALL_FINISHED for e in result.events)
    assert finished == calls
