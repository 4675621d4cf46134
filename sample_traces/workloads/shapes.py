"""The three workflow classes of seed section 19: serial rounds, tool fan-out, repair loop.

Each shape appends one program's nodes to a :class:`ProgramBuilder`. ``seed-mix`` and
``two-tenants`` draw a shape per program from these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentconsole.sample_traces.format import Branch, Outcome, PrefixSegment, TraceProgram
from agentconsole.sample_traces.workloads.builder import ProgramBuilder
from agentconsole.sample_traces.workloads.tools import (
    APPLY_PATCH,
    BROWSE,
    HTTP_GET,
    HTTP_POST,
    PYTHON,
    READ_FILE,
    RUN_TESTS,
    SQL_QUERY,
    WEB_SEARCH,
)
from agentconsole.scheduler.program import ToolSpec

#: Tools of a serial ReAct loop, with weights; a rare non-idempotent POST exercises no-retry.
SERIAL_TOOLS: tuple[tuple[ToolSpec, float], ...] = (
    (WEB_SEARCH, 0.30),
    (READ_FILE, 0.25),
    (PYTHON, 0.20),
    (SQL_QUERY, 0.10),
    (HTTP_GET, 0.10),
    (BROWSE, 0.04),
    (HTTP_POST, 0.01),
)
#: Read-only lookups an LLM issues in parallel.
FANOUT_TOOLS: tuple[tuple[ToolSpec, float], ...] = (
    (WEB_SEARCH, 0.40),
    (HTTP_GET, 0.20),
    (SQL_QUERY, 0.20),
    (READ_FILE, 0.15),
    (BROWSE, 0.05),
)


@dataclass(frozen=True, slots=True)
class ShapeKnobs:
    """Parameters of the three shapes (defaults: seed section 19)."""

    serial_rounds: int = 10
    fanout_width: int = 4
    fanout_stages: int = 2
    p_second_repair: float = 0.3
    task_prompt_median: float = 600.0


def _pick(b: ProgramBuilder, table: tuple[tuple[ToolSpec, float], ...]) -> ToolSpec:
    return table[b.draw.pick([w for _, w in table])][0]


def _task(b: ProgramBuilder, k: ShapeKnobs) -> int:
    return b.tokens(k.task_prompt_median, 0.6, 50, 4000)


def serial(b: ProgramBuilder, k: ShapeKnobs) -> None:
    """``serial_rounds`` LLM calls with one tool call between consecutive calls."""
    prev = b.llm([], prompt=_task(b, k))
    for _ in range(k.serial_rounds - 1):
        prev = b.llm([b.tool([prev], _pick(b, SERIAL_TOOLS))])


def fanout(b: ProgramBuilder, k: ShapeKnobs) -> None:
    """``fanout_stages`` times an LLM emits ``fanout_width`` parallel tools; the next joins them."""
    prev = b.llm([], prompt=_task(b, k))
    for _ in range(k.fanout_stages):
        calls = [b.tool([prev], _pick(b, FANOUT_TOOLS)) for _ in range(k.fanout_width)]
        prev = b.llm(calls)


def repair(b: ProgramBuilder, k: ShapeKnobs) -> None:
    """Plan, read, write a patch, test (fails), then 1 or 2 repair rounds until tests pass."""
    plan = b.llm([], prompt=_task(b, k))
    write = b.llm([b.tool([plan], READ_FILE)])
    test = b.tool([b.tool([write], APPLY_PATCH)], RUN_TESTS, outcome=Outcome.FAIL)
    repairs = 2 if b.draw.chance(k.p_second_repair) else 1
    for r in range(repairs):
        fix = b.llm([test], prompt=b.tokens(150, 0.4, 20, 1000), branch=Branch.REPAIR)
        patch = b.tool([fix], APPLY_PATCH, branch=Branch.REPAIR)
        verdict = Outcome.OK if r == repairs - 1 else Outcome.FAIL
        test = b.tool([patch], RUN_TESTS, outcome=verdict, branch=Branch.REPAIR)
    b.llm([test])


SHAPES: dict[str, Callable[[ProgramBuilder, ShapeKnobs], None]] = {
    "serial": serial,
    "fanout": fanout,
    "repair": repair,
}


def platform_prefix(tenant: str, shared_tokens: int, tenant_tokens: int) -> list[PrefixSegment]:
    """The public platform context (system + tool schemas) then the tenant's private profile.

    A segment with zero tokens is left out.
    """
    out = []
    if shared_tokens:
        out.append(PrefixSegment(id="platform/agent-system", tokens=shared_tokens, public=True))
    if tenant_tokens:
        out.append(PrefixSegment(id=f"{tenant}/profile", tokens=tenant_tokens, public=False))
    return out


def task_context(program_id: str, tokens: int) -> list[PrefixSegment]:
    """The program's own context (task documents, repository snapshot), private to it and
    shared by all its calls; empty for zero tokens."""
    return [PrefixSegment(id=f"{program_id}/task", tokens=tokens)] if tokens else []


def mixed_program(
    b: ProgramBuilder,
    *,
    mix: Sequence[float],
    knobs: ShapeKnobs,
    program_id: str,
    tenant: str,
    workload: str,
    arrival_s: float,
    prefix: Sequence[PrefixSegment],
) -> TraceProgram:
    """Draw a shape with weights ``mix`` (serial, fanout, repair order) and build one program."""
    if len(mix) != len(SHAPES) or not any(w > 0 for w in mix) or any(w < 0 for w in mix):
        raise ValueError(f"mix needs {len(SHAPES)} non-negative weights ({', '.join(SHAPES)})")
    name = list(SHAPES)[b.draw.pick(mix)]
    SHAPES[name](b, knobs)
    return b.finish(
        program_id=program_id,
        tenant=tenant,
        workload=workload,
        shape=name,
        arrival_s=arrival_s,
        prefix=prefix,
    )
