"""The workloads the CPU benchmarks replay fit the tiny model and keep their shape."""

from __future__ import annotations

from agentconsole.sample_traces.format import LLMNode, context_tokens
from agentconsole.server.runtime.sglang.workload_scale import (
    TINY_CODING_MAX_STEPS,
    TINY_MAX_CONTEXT,
    TINY_WORKLOADS,
    longest_context,
    tiny_long_coding,
)


def test_every_tiny_workload_fits_the_model_context() -> None:
    for name, (make, _) in TINY_WORKLOADS.items():
        programs = make(12, 4.0, 1)
        assert len(programs) == 12, name
        assert max(longest_context(p) for p in programs) <= TINY_MAX_CONTEXT, name


def test_tiny_long_coding_is_mostly_private_context_and_capped_in_steps() -> None:
    programs = tiny_long_coding(16, 4.0, 0)
    prompt = shared = 0
    for program in programs:
        prefix = sum(segment.tokens for segment in program.prefix)
        calls = [n for n in program.nodes if isinstance(n, LLMNode)]
        # a session's steps, plus the calls of subagents it spawned (each a short chain)
        assert 1 <= len(calls) <= 3 * TINY_CODING_MAX_STEPS
        for call in calls:
            prompt += context_tokens(program, call.id)
            shared += prefix
    # what affinity keeps: most of a prompt is the session's own context, not the shared prefix
    assert shared < 0.5 * prompt
    # the longest session is scaled to the model's positions, not far below them
    assert max(longest_context(p) for p in programs) > 0.8 * TINY_MAX_CONTEXT
