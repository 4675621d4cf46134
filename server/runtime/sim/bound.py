"""An upper bound on the program throughput that *any* schedule can reach on a cost model.

Why it exists: a sweep's ratio to ``fcfs`` means little without knowing how far the hardware
itself allows a schedule to go. This bound is what the cost model makes unavoidable, with every
doubt resolved in the schedule's favour:

- every token of a shared context is computed once, ever (perfect prefix reuse, no eviction);
- the weights are read for free (an infinitely large batch), with no per-step overheads;
- compute-bound prefill hides completely under memory-bound decode (the bound takes the larger
  of the two totals, not their sum);
- discarded speculative branches are skipped, and cancelled programs are left out entirely
  (they do work but never count as finished).

Serving the programs to completion therefore takes at least that much engine time, and no
policy, ordering, batching or KV placement on this cost model sustains more than
:attr:`ThroughputBound.programs_per_s` of them; at that rate its queues would grow without end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agentconsole.sample_traces.format import (
    Branch,
    LLMNode,
    TraceProgram,
    context_segments,
    node_segments,
)
from agentconsole.server.runtime.sim.costmodel import CostModel, attention_pairs
from agentconsole.server.runtime.sim.programs import shared_across_tenants


@dataclass(slots=True)
class WorkTokens:
    """Token counts a trace cannot avoid: computed prompt tokens and the causal pairs they
    attend, decode steps and the KV tokens those steps read."""

    prefill_tokens: int = 0
    prefill_pairs: int = 0
    decode_tokens: int = 0
    decode_context: int = 0


@dataclass(frozen=True, slots=True)
class ThroughputBound:
    """The floor of GPU time that ``programs`` need, and the throughput ceiling it implies."""

    programs: int  #: programs that can finish (never cancelled)
    compute_s: float  #: seconds of compute those programs need at the least
    memory_s: float  #: seconds of HBM traffic they need at the least
    replicas: int = 1

    @property
    def seconds_per_program(self) -> float:
        """Floor of one engine's busy time per finished program."""
        return max(self.compute_s, self.memory_s) / self.programs if self.programs else 0.0

    @property
    def programs_per_s(self) -> float:
        """No schedule finishes programs faster than this (all replicas together)."""
        per_program = self.seconds_per_program
        return self.replicas / per_program if per_program > 0 else float("inf")


def throughput_bound(
    programs: Iterable[TraceProgram], cost: CostModel, *, replicas: int = 1
) -> ThroughputBound:
    """Bound the finished-program throughput of ``programs`` on ``replicas`` engines of ``cost``.

    Shared context is keyed as the engine caches it: a public segment once for everyone in a
    call public as a whole (:func:`~.programs.shared_across_tenants`), every other segment once
    per tenant (its key already names its program or prefix).
    """
    seen: set[tuple[str, str]] = set()
    work = WorkTokens()
    counted = 0
    for program in programs:
        if program.cancel_at_s is not None:
            continue
        counted += 1
        for node in program.nodes:
            if not isinstance(node, LLMNode) or node.branch is Branch.DISCARDED:
                continue
            context = 0
            segments = context_segments(program, node.id)
            shared = shared_across_tenants(segments)
            for segment in segments:
                scope = "" if segment.public and shared else program.tenant
                key = (scope, segment.key)
                if key not in seen:
                    seen.add(key)
                    work.prefill_tokens += segment.tokens
                    work.prefill_pairs += attention_pairs(segment.tokens, context)
                context += segment.tokens
            # the first output token comes with the prefill's last step; each later one is a
            # decode step attending everything before it
            steps = node.output_tokens - 1
            work.decode_tokens += steps
            work.decode_context += steps * context + steps * (steps + 1) // 2
    compute_s, memory_s = cost.work_floor_seconds(
        work.prefill_tokens, work.prefill_pairs, work.decode_tokens, work.decode_context
    )
    return ThroughputBound(counted, compute_s, memory_s, replicas)


@dataclass(frozen=True, slots=True)
class OracleHits:
    """Prefix reuse with an infinite cache: every prompt token any earlier call of the same
    scope (its tenant, or everyone for a public segment of a call public as a whole) computed
    is a hit."""

    hit_tokens: int
    prompt_tokens: int


def oracle_hits(programs: Iterable[TraceProgram]) -> OracleHits:
    """The hit tokens an infinite, never-evicting cache would give ``programs`` (every LLM
    call of every program, in arrival order; the ceiling a policy's hit tokens compare to)."""
    seen: set[tuple[str, str]] = set()
    hits = prompt = 0
    for program in sorted(programs, key=lambda p: p.arrival_s):
        for node in program.nodes:
            if not isinstance(node, LLMNode):
                continue
            segments = context_segments(program, node.id)
            shared = shared_across_tenants(segments)
            for segment in segments:
                scope = "" if segment.public and shared else program.tenant
                key = (scope, segment.key)
                prompt += segment.tokens
                if key in seen:
                    hits += segment.tokens
                else:
                    seen.add(key)
            # its answer was decoded into the cache: a later call reading it hits
            for segment in node_segments(program, node):
                seen.add((program.tenant, segment.key))
    return OracleHits(hits, prompt)
