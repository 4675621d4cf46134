"""``seed-mix``: the minimal reproduction experiment of seed section 19.

Equal thirds of serial 10-round, 4-way fan-out and repair-loop programs from 4 equal tenants,
Poisson arrivals, tool latency 50 ms-10 s, 1% of tool attempts time out (then retried) and 1%
of programs are cancelled. The 80K shared prefix is what every call of a program starts with
(overview section 7: system instructions, tool schemas, a repository or document snapshot):
16K public platform context (system + tool schemas) shared by all tenants, a 2K private tenant
profile, and 62K of task context private to the program, shared by all its calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentconsole.sample_traces.format import TRACE_TOOL_KINDS, ToolKind, TraceProgram
from agentconsole.sample_traces.workloads.builder import (
    Faults,
    ProgramBuilder,
    Sizes,
    check_request,
    program_id,
)
from agentconsole.sample_traces.workloads.sampling import Draw, poisson_arrivals, tenant_names
from agentconsole.sample_traces.workloads.shapes import (
    ShapeKnobs,
    mixed_program,
    platform_prefix,
    task_context,
)

NAME = "seed-mix"


def seed_mix(
    n_programs: int = 20,
    rate: float = 1.0,
    seed: int = 0,
    *,
    tenants: int = 4,
    mix: Sequence[float] = (1.0, 1.0, 1.0),
    serial_rounds: int = 10,
    fanout_width: int = 4,
    fanout_stages: int = 2,
    p_second_repair: float = 0.3,
    shared_prefix_tokens: int = 16_000,
    tenant_prefix_tokens: int = 2_000,
    task_context_tokens: int = 62_000,
    p_timeout: float = 0.01,
    p_cancel: float = 0.01,
    deadline_slack: float | None = 4.0,
    p_slow_tool: float = 0.0,
    slow_tool_kind: str | None = None,
) -> list[TraceProgram]:
    """``n_programs`` programs arriving as a Poisson process of ``rate`` per second.

    ``mix`` weighs the serial, fanout and repair shapes; tenants are drawn uniformly.
    ``p_slow_tool`` makes that share of tool calls last 30-300 s (section 17: slow tools);
    with ``slow_tool_kind`` (a :class:`ToolKind` value, e.g. ``test_run``) only that share of
    that kind's calls, so a per-tool estimator can learn which waits are long.
    Raises ``ValueError`` for a negative size, a non-positive rate or a bad ``mix``.
    """
    check_request(n_programs, rate)
    kinds = [k.value for k in TRACE_TOOL_KINDS]
    if slow_tool_kind is not None and slow_tool_kind not in kinds:
        raise ValueError(f"slow_tool_kind {slow_tool_kind!r} is not one of {', '.join(kinds)}")
    root = Draw(seed)
    arrivals = poisson_arrivals(root.child(), n_programs, rate)
    draw = root.child()
    names = tenant_names(tenants)
    knobs = ShapeKnobs(serial_rounds, fanout_width, fanout_stages, p_second_repair)
    faults = Faults(
        p_timeout=p_timeout,
        p_cancel=p_cancel,
        deadline_slack=deadline_slack,
        p_slow=p_slow_tool,
        slow_kind=ToolKind(slow_tool_kind) if slow_tool_kind is not None else None,
    )
    programs = []
    for i, arrival in enumerate(arrivals):
        tenant = names[draw.integer(0, len(names) - 1)]
        programs.append(
            mixed_program(
                ProgramBuilder(draw, Sizes(), faults),
                mix=mix,
                knobs=knobs,
                program_id=program_id(NAME, seed, i),
                tenant=tenant,
                workload=NAME,
                arrival_s=arrival,
                prefix=[
                    *platform_prefix(tenant, shared_prefix_tokens, tenant_prefix_tokens),
                    *task_context(program_id(NAME, seed, i), task_context_tokens),
                ],
            )
        )
    return programs
