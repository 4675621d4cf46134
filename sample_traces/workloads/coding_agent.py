"""``coding-agent``: the 13-round code-repair agent of seed section 16.

The first request carries 15K of system/tool schemas (public), a 60K repository snapshot
(private to the tenant, shared by its programs on that repo) and a ~5K issue. Each round appends
~2K (a tool result plus a short turn prompt) and decodes ~220 tokens. Exploration uses search,
file reads and code execution; then a patch is written and tested, a failing test unlocks up to
two repair rounds, and the last round is a short decode. LLM calls per program = ``rounds``.
With ``p_insert > 0`` that share of the later calls also inserts ~``insert_tokens`` of retrieved
memory right after the repository prefix, before the history (seed section 8).
"""

from __future__ import annotations

from agentconsole.sample_traces.format import Branch, Outcome, PrefixSegment, TraceProgram
from agentconsole.sample_traces.workloads.builder import (
    Faults,
    Inserts,
    ProgramBuilder,
    Sizes,
    check_request,
    program_id,
)
from agentconsole.sample_traces.workloads.sampling import Draw, poisson_arrivals, tenant_names
from agentconsole.sample_traces.workloads.tools import (
    APPLY_PATCH,
    CODE_SEARCH,
    PYTHON,
    READ_FILE,
    RUN_TESTS,
)
from agentconsole.scheduler.program import ToolSpec

NAME = "coding-agent"
EXPLORE_TOOLS: tuple[tuple[ToolSpec, float], ...] = (
    (CODE_SEARCH, 0.5),
    (READ_FILE, 0.25),
    (PYTHON, 0.25),
)
#: P(0, 1, 2 repair rounds): the first test run fails 60% of the time.
REPAIR_WEIGHTS = (0.4, 0.4, 0.2)
SIZES = Sizes(
    output_median=220.0,
    output_sigma=0.4,
    result_median=1800.0,
    result_sigma=0.5,
    result_range=(300, 8000),
)


def _program(b: ProgramBuilder, rounds: int, issue_tokens: int) -> None:
    repairs = b.draw.pick(REPAIR_WEIGHTS)
    prev = b.llm([], prompt=b.tokens(issue_tokens, 0.25, 500, 4 * issue_tokens))
    prev = b.tool([prev], CODE_SEARCH)
    for _ in range(rounds - 3 - repairs):
        spec = EXPLORE_TOOLS[b.draw.pick([w for _, w in EXPLORE_TOOLS])][0]
        prev = b.tool([b.llm([prev])], spec)
    verdict = Outcome.FAIL if repairs else Outcome.OK
    test = b.tool([b.tool([b.llm([prev])], APPLY_PATCH)], RUN_TESTS, outcome=verdict)
    for r in range(repairs):
        fix = b.llm([test], prompt=b.tokens(150, 0.4, 20, 1000), branch=Branch.REPAIR)
        patch = b.tool([fix], APPLY_PATCH, branch=Branch.REPAIR)
        verdict = Outcome.OK if r == repairs - 1 else Outcome.FAIL
        test = b.tool([patch], RUN_TESTS, outcome=verdict, branch=Branch.REPAIR)
    b.llm([test], output=b.tokens(60, 0.4, 8, 400))


def coding_agent(
    n_programs: int = 20,
    rate: float = 0.2,
    seed: int = 0,
    *,
    tenants: int = 4,
    repos_per_tenant: int = 2,
    rounds: int = 13,
    system_tokens: int = 15_000,
    repo_tokens: int = 60_000,
    issue_tokens: int = 5_000,
    p_timeout: float = 0.01,
    p_cancel: float = 0.01,
    deadline_slack: float | None = 4.0,
    p_insert: float = 0.0,
    insert_tokens: int = 1_000,
) -> list[TraceProgram]:
    """``n_programs`` repair sessions arriving as a Poisson process of ``rate`` per second.

    ``p_insert``: the share of non-first calls that insert a median ``insert_tokens`` of new
    tokens after the prefix (0: none, the traces are those without the knob).
    Raises ``ValueError`` for a negative size, a non-positive rate, ``rounds < 5`` (planner,
    writer, two repairs and the final answer need five calls) or ``p_insert`` outside [0, 1].
    """
    check_request(n_programs, rate)
    if rounds < 5 or repos_per_tenant < 1:
        raise ValueError("coding-agent needs rounds >= 5 and repos_per_tenant >= 1")
    if not 0.0 <= p_insert <= 1.0 or insert_tokens < 1:
        raise ValueError("coding-agent needs 0 <= p_insert <= 1 and insert_tokens >= 1")
    root = Draw(seed)
    arrivals = poisson_arrivals(root.child(), n_programs, rate)
    draw = root.child()
    names = tenant_names(tenants)
    faults = Faults(p_timeout=p_timeout, p_cancel=p_cancel, deadline_slack=deadline_slack)
    system = PrefixSegment(id="platform/coding-agent-tools", tokens=system_tokens, public=True)
    programs = []
    for i, arrival in enumerate(arrivals):
        tenant = names[draw.integer(0, len(names) - 1)]
        repo = PrefixSegment(
            id=f"{tenant}/repo-{draw.integer(0, repos_per_tenant - 1)}", tokens=repo_tokens
        )
        inserts = Inserts(p_insert, after=repo.id, median=insert_tokens)
        b = ProgramBuilder(draw, SIZES, faults, inserts)
        _program(b, rounds, issue_tokens)
        programs.append(
            b.finish(
                program_id=program_id(NAME, seed, i),
                tenant=tenant,
                workload=NAME,
                shape="code-repair",
                arrival_s=arrival,
                prefix=[system, repo],
            )
        )
    return programs
