"""``two-tenants``: a bursty heavy tenant flooding the system beside a light steady one.

Seed section 13 asks for tenant isolation; this workload is its stress case. Both tenants run
the ``seed-mix`` shapes and the same 80K prefix composition (16K public platform context, a
private 2K tenant profile, 62K of the program's own task context).
The heavy tenant (90% of programs by default) arrives in bursts: burst starts are Poisson and
each burst brings a geometric number of programs a few tens of milliseconds apart; the light
tenant arrives as a plain Poisson process.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentconsole.sample_traces.format import TraceProgram
from agentconsole.sample_traces.workloads.builder import (
    Faults,
    ProgramBuilder,
    Sizes,
    check_request,
    program_id,
)
from agentconsole.sample_traces.workloads.sampling import Draw, poisson_arrivals
from agentconsole.sample_traces.workloads.shapes import (
    ShapeKnobs,
    mixed_program,
    platform_prefix,
    task_context,
)

NAME = "two-tenants"
HEAVY = "tenant-heavy"
LIGHT = "tenant-light"


def bursty_arrivals(
    draw: Draw, n: int, rate: float, burst_mean: float, gap_s: float
) -> list[float]:
    """``n`` arrivals at ``rate``/s on average, in bursts of mean size ``burst_mean``."""
    out: list[float] = []
    t = 0.0
    while len(out) < n:
        size = draw.geometric(burst_mean)
        u = t
        for _ in range(min(size, n - len(out))):
            out.append(u)
            u += draw.exponential(1.0 / gap_s)
        t += draw.exponential(rate / burst_mean)
    return out


def two_tenants(
    n_programs: int = 20,
    rate: float = 1.0,
    seed: int = 0,
    *,
    heavy_share: float = 0.9,
    burst_mean: float = 8.0,
    burst_gap_s: float = 0.05,
    mix: Sequence[float] = (1.0, 1.0, 1.0),
    shared_prefix_tokens: int = 16_000,
    tenant_prefix_tokens: int = 2_000,
    task_context_tokens: int = 62_000,
    p_timeout: float = 0.01,
    p_cancel: float = 0.01,
    deadline_slack: float | None = 4.0,
) -> list[TraceProgram]:
    """The first ``n_programs`` arrivals of the merged heavy and light streams (total ``rate``).

    Raises ``ValueError`` for a negative size, a non-positive rate or a share outside (0, 1).
    """
    check_request(n_programs, rate)
    if not 0.0 < heavy_share < 1.0:
        raise ValueError(f"heavy_share must be in (0, 1), got {heavy_share}")
    if burst_mean < 1.0 or not burst_gap_s > 0.0:
        raise ValueError("burst_mean must be >= 1 and burst_gap_s > 0")
    root = Draw(seed)
    heavy = bursty_arrivals(root.child(), n_programs, rate * heavy_share, burst_mean, burst_gap_s)
    light = poisson_arrivals(root.child(), n_programs, rate * (1.0 - heavy_share))
    merged = sorted([(t, HEAVY) for t in heavy] + [(t, LIGHT) for t in light])[:n_programs]
    draw = root.child()
    knobs = ShapeKnobs()
    faults = Faults(p_timeout=p_timeout, p_cancel=p_cancel, deadline_slack=deadline_slack)
    return [
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
        for i, (arrival, tenant) in enumerate(merged)
    ]
