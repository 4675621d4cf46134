"""Shared machinery of the workloads: size and fault knobs, and a builder for one program.

:class:`ProgramBuilder` appends nodes parents-first (ids ``n0``, ``n1``, ...), draws token
sizes and tool attempts, and :meth:`ProgramBuilder.finish` places the optional cancel and the
deadline relative to the program's nominal life (:mod:`agentconsole.sample_traces.nominal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentconsole.sample_traces.format import (
    Branch,
    Insert,
    LLMNode,
    Outcome,
    PrefixSegment,
    ToolAttempt,
    ToolKind,
    ToolNode,
    TraceNode,
    TraceProgram,
)
from agentconsole.sample_traces.nominal import critical_path_s
from agentconsole.sample_traces.workloads.sampling import Draw
from agentconsole.sample_traces.workloads.tools import (
    MAX_LATENCY_S,
    MIN_LATENCY_S,
    PROFILES,
)
from agentconsole.scheduler.program import ToolSpec


@dataclass(frozen=True, slots=True)
class Sizes:
    """Token-size distributions (log-normal median, log-sd, truncation range)."""

    output_median: float = 250.0
    output_sigma: float = 0.45
    output_range: tuple[int, int] = (16, 2048)
    turn_prompt_median: float = 40.0
    turn_prompt_sigma: float = 0.5
    turn_prompt_range: tuple[int, int] = (1, 400)
    #: ``None`` uses the tool kind's profile median.
    result_median: float | None = None
    result_sigma: float = 0.6
    result_range: tuple[int, int] = (300, 4000)


@dataclass(frozen=True, slots=True)
class Faults:
    """Per-attempt timeout and per-program cancel probabilities, retries and deadline slack."""

    p_timeout: float = 0.01
    p_cancel: float = 0.01
    max_attempts: int = 3
    #: deadline = slack x nominal life; ``None`` gives programs no deadline.
    deadline_slack: float | None = 4.0
    #: share of tool calls that are *slow* (a long test suite, a human approval): their one
    #: attempt lasts ``slow_range_s`` (log-uniform) under a timeout raised to match
    p_slow: float = 0.0
    slow_range_s: tuple[float, float] = (30.0, 300.0)
    #: only tools of this kind are ever slow (slowness predictable per tool, as Continuum
    #: observes of real agents); ``None``: any tool call may be
    slow_kind: ToolKind | None = None


@dataclass(frozen=True, slots=True)
class Inserts:
    """Mid-prompt insertions (seed section 8): a share ``p_insert`` of a program's non-root
    calls put ``median``-sized new tokens (retrieved memory, the latest tool results; a
    log-normal truncated to [median/10, 8 x median]) right after the prefix segment ``after``
    instead of appending them.
    No published figure gives how many calls of an agent do this, so workloads default to
    none (``p_insert=0``) and a caller asks for them."""

    p_insert: float = 0.0
    after: str = ""
    median: float = 1000.0
    sigma: float = 0.6


def check_request(n_programs: int, rate: float) -> None:
    """Reject impossible sizes early with a plain message (``ValueError``)."""
    if n_programs < 0:
        raise ValueError(f"n_programs must be >= 0, got {n_programs}")
    if not rate > 0:
        raise ValueError(f"rate must be > 0 programs/s, got {rate}")


def program_id(workload: str, seed: int, index: int) -> str:
    """Stable, trace-unique ids: ``seed-mix-s0-00012``."""
    return f"{workload}-s{seed}-{index:05d}"


class ProgramBuilder:
    """Accumulates one program's nodes; use once per program."""

    def __init__(
        self, draw: Draw, sizes: Sizes, faults: Faults, inserts: Inserts | None = None
    ) -> None:
        self.draw = draw
        self.sizes = sizes
        self.faults = faults
        self.inserts = inserts
        self.nodes: list[TraceNode] = []

    def tokens(self, median: float, sigma: float, lo: int, hi: int) -> int:
        """A truncated log-normal token count in ``[lo, hi]`` (``lo >= 1``)."""
        return round(self.draw.lognormal(median, sigma, lo, hi))

    def _next_id(self) -> str:
        return f"n{len(self.nodes)}"

    def llm(
        self,
        parents: Sequence[str],
        *,
        prompt: int | None = None,
        output: int | None = None,
        branch: Branch = Branch.MAIN,
    ) -> str:
        """Append an LLM node; unset sizes are drawn (a short turn prompt, a typical output), and
        a non-root call may insert tokens mid-prompt (``inserts``)."""
        s = self.sizes
        if prompt is None:
            prompt = self.tokens(s.turn_prompt_median, s.turn_prompt_sigma, *s.turn_prompt_range)
        if output is None:
            output = self.tokens(s.output_median, s.output_sigma, *s.output_range)
        node = LLMNode(
            id=self._next_id(),
            parents=tuple(parents),
            branch=branch,
            prompt_tokens=prompt,
            output_tokens=output,
            insert=self._insert() if parents else None,
        )
        self.nodes.append(node)
        return node.id

    def _insert(self) -> Insert | None:
        """An insertion for the next call, drawn only when enabled (so traces without them stay
        byte-identical: no draw is taken)."""
        knob = self.inserts
        if knob is None or not knob.p_insert or not self.draw.chance(knob.p_insert):
            return None
        lo, hi = max(1, round(knob.median / 10)), max(1, round(knob.median * 8))
        return Insert(after=knob.after, tokens=self.tokens(knob.median, knob.sigma, lo, hi))

    def tool(
        self,
        parents: Sequence[str],
        spec: ToolSpec,
        *,
        outcome: Outcome = Outcome.OK,
        branch: Branch = Branch.MAIN,
    ) -> str:
        """Append a tool node that ends in ``outcome`` unless every allowed attempt times out."""
        profile = PROFILES[spec.kind]
        s = self.sizes
        median = profile.result_median if s.result_median is None else s.result_median
        timeout_s = profile.timeout_s
        result_tokens = self.tokens(median, s.result_sigma, *s.result_range)
        # the slow draw is only taken when enabled, so default traces stay byte-identical
        if (
            self.faults.p_slow
            and self.faults.slow_kind in (None, spec.kind)
            and self.draw.chance(self.faults.p_slow)
        ):
            lo, hi = self.faults.slow_range_s
            latency = round(lo * (hi / lo) ** self.draw.unit(), 3)
            attempts: tuple[ToolAttempt, ...] = (ToolAttempt(latency_s=latency, outcome=outcome),)
            timeout_s = max(timeout_s, hi)
        else:
            attempts = self._attempts(spec, outcome)
        node = ToolNode(
            id=self._next_id(),
            parents=tuple(parents),
            branch=branch,
            tool=spec.name,
            tool_kind=spec.kind,
            side_effect=spec.side_effect,
            idempotent=spec.idempotent,
            timeout_s=timeout_s,
            result_tokens=result_tokens,
            attempts=attempts,
        )
        self.nodes.append(node)
        return node.id

    def _attempts(self, spec: ToolSpec, outcome: Outcome) -> tuple[ToolAttempt, ...]:
        profile = PROFILES[spec.kind]
        limit = self.faults.max_attempts if spec.auto_retry_safe else 1
        out: list[ToolAttempt] = []
        while len(out) < limit:
            if self.draw.chance(self.faults.p_timeout):
                out.append(ToolAttempt(latency_s=profile.timeout_s, outcome=Outcome.TIMEOUT))
                continue
            hi = min(MAX_LATENCY_S, profile.timeout_s)
            latency = self.draw.spread(profile.p5_s, profile.p95_s, MIN_LATENCY_S, hi)
            out.append(ToolAttempt(latency_s=round(latency, 3), outcome=outcome))
            break
        return tuple(out)

    def finish(
        self,
        *,
        program_id: str,
        tenant: str,
        workload: str,
        shape: str,
        arrival_s: float,
        prefix: Sequence[PrefixSegment],
    ) -> TraceProgram:
        """Build the program, drawing a cancel (inside 10-90% of its nominal life) and deadline."""
        life = critical_path_s(self.nodes)
        cancel_at = None
        if self.draw.chance(self.faults.p_cancel):
            cancel_at = round(self.draw.uniform(0.1, 0.9) * life, 3)
        slack = self.faults.deadline_slack
        deadline = None if slack is None else max(0.1, round(slack * life, 1))
        return TraceProgram(
            id=program_id,
            tenant=tenant,
            workload=workload,
            shape=shape,
            arrival_s=round(arrival_s, 6),
            prefix=tuple(prefix),
            nodes=tuple(self.nodes),
            deadline_s=deadline,
            cancel_at_s=cancel_at,
        )
