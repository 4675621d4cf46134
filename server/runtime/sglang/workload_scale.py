"""Sample workloads scaled down to what a small live engine can serve (the CPU tiny model).

The named workloads (``sample_traces``) carry production sizes (seed-mix: an 80K-token prefix,
tools up to 10 s). :func:`scaled_workload` multiplies every token count by one factor (the
same for all programs, so a shared prefix id keeps one size) small enough that no call exceeds
the model's context, and every duration by another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agentconsole.sample_traces.format import (
    LLMNode,
    PrefixSegment,
    ToolAttempt,
    TraceNode,
    TraceProgram,
    context_tokens,
)
from agentconsole.sample_traces.generator import generate

_FIT_TRIES = 20  # rescalings before giving up (each removes the excess of the last)


def longest_context(program: TraceProgram) -> int:
    """The largest prompt plus output of any LLM call of ``program``, in tokens."""
    return max(
        (
            context_tokens(program, n.id) + n.output_tokens
            for n in program.nodes
            if isinstance(n, LLMNode)
        ),
        default=0,
    )


def scale_program(
    program: TraceProgram, *, token_factor: float, time_factor: float
) -> TraceProgram:
    """``program`` with every token count times ``token_factor`` and every duration (tool
    latency, timeout, deadline, cancel time) times ``time_factor``; arrival is left alone.
    Outputs keep at least one token. Scale every program of a trace by the same factors, or
    segments they share (the same prefix id) would differ in size."""

    def n(value: int, minimum: int = 0) -> int:
        return max(minimum, round(value * token_factor))

    nodes: list[TraceNode] = []
    for node in program.nodes:
        if isinstance(node, LLMNode):
            nodes.append(
                replace(
                    node,
                    prompt_tokens=n(node.prompt_tokens),
                    output_tokens=n(node.output_tokens, 1),
                )
            )
        else:
            attempts = tuple(
                ToolAttempt(latency_s=a.latency_s * time_factor, outcome=a.outcome)
                for a in node.attempts
            )
            nodes.append(
                replace(
                    node,
                    timeout_s=node.timeout_s * time_factor,
                    result_tokens=n(node.result_tokens),
                    attempts=attempts,
                )
            )
    return replace(
        program,
        prefix=tuple(
            PrefixSegment(id=p.id, tokens=n(p.tokens), public=p.public) for p in program.prefix
        ),
        nodes=tuple(nodes),
        deadline_s=None if program.deadline_s is None else program.deadline_s * time_factor,
        cancel_at_s=None if program.cancel_at_s is None else program.cancel_at_s * time_factor,
    )


def scaled_workload(
    name: str,
    n_programs: int,
    rate: float,
    seed: int,
    *,
    token_factor: float,
    time_factor: float,
    max_context: int,
    **overrides: Any,
) -> list[TraceProgram]:
    """A named workload (``sample_traces``) scaled down for a small live engine: one token
    factor for all programs, ``token_factor`` or less so no call's prompt plus output exceeds
    ``max_context``; arrivals are a Poisson process of ``rate`` programs per second;
    ``overrides`` set the workload's own parameters (``generate``)."""
    programs = generate(name, n_programs=n_programs, rate=rate, seed=seed, **overrides)
    longest = max((longest_context(p) for p in programs), default=0)
    factor = min(token_factor, max_context / longest) if longest else token_factor
    for _ in range(_FIT_TRIES):
        scaled = [scale_program(p, token_factor=factor, time_factor=time_factor) for p in programs]
        # each count is rounded on its own (outputs to at least one token), so a context can
        # pass the bound by a few tokens: shrink the factor by the excess and scale again
        over = max((longest_context(p) for p in scaled), default=0) - max_context
        if over <= 0:
            return scaled
        factor *= max_context / (max_context + over)
    raise ValueError(f"{name}: no token factor fits every context in {max_context} tokens")


#: seed-mix on the CPU tiny model: ~1/50 of the tokens (the 80K prefix becomes ~1.6K, contexts
#: stay under the model's 2K positions), tools 10x faster
TINY_TOKEN_FACTOR, TINY_TIME_FACTOR, TINY_MAX_CONTEXT = 0.02, 0.1, 1900


def tiny_seed_mix(n_programs: int, rate: float, seed: int) -> list[TraceProgram]:
    """seed-mix (seed section 19) scaled to the CPU tiny model (``calibrate``, the CPU bench)."""
    return scaled_workload(
        "seed-mix",
        n_programs,
        rate,
        seed,
        token_factor=TINY_TOKEN_FACTOR,
        time_factor=TINY_TIME_FACTOR,
        max_context=TINY_MAX_CONTEXT,
    )


#: long-coding on the CPU tiny model: contexts scaled to the model's positions as one factor
#: (the longest session's context reaches ~1.9K tokens), tools 100x faster (TraceLab's
#: minutes-long tail becomes seconds), sessions cut at 40 steps so that a run's length is set
#: by the engine rather than by one session's sequential chain
TINY_CODING_TIME_FACTOR, TINY_CODING_MAX_STEPS = 0.01, 40


def tiny_long_coding(n_programs: int, rate: float, seed: int) -> list[TraceProgram]:
    """long-coding (issue 12's long-horizon sessions) scaled to the CPU tiny model: most of each
    prompt is the session's own growing context, the case where a session's rank matters."""
    return scaled_workload(
        "long-coding",
        n_programs,
        rate,
        seed,
        token_factor=1.0,
        time_factor=TINY_CODING_TIME_FACTOR,
        max_context=TINY_MAX_CONTEXT,
        max_steps=TINY_CODING_MAX_STEPS,
    )


#: the workloads the CPU benchmarks can replay, by name: how to make one, and the factor its
#: durations were scaled by (time constants of the scheduler are scaled alike)
TINY_WORKLOADS: dict[str, tuple[Callable[[int, float, int], list[TraceProgram]], float]] = {
    "seed-mix": (tiny_seed_mix, TINY_TIME_FACTOR),
    "long-coding": (tiny_long_coding, TINY_CODING_TIME_FACTOR),
}
