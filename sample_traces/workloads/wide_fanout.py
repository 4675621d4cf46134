"""``wide-fanout``: LATS/MCTS-style tree search with wide parallel expansions (Autellix workload).

Per level the current node expands into 4-8 children in parallel; each child is an action LLM
call, an observation (wiki search) and a value LLM call. The best child continues (``main``),
its siblings are ``discarded`` (their tokens are wasted work). Autellix's LATS/HotpotQA trace
has ~160 LLM calls per program at 467 prefill / 72.6 decode tokens per call; the defaults give
18-210 calls (2 + 2 x fan-out x depth; mean ~86) with outputs averaging ~70 tokens.
"""

from __future__ import annotations

from agentconsole.sample_traces.format import Branch, PrefixSegment, TraceProgram
from agentconsole.sample_traces.workloads.builder import (
    Faults,
    ProgramBuilder,
    Sizes,
    check_request,
    program_id,
)
from agentconsole.sample_traces.workloads.sampling import Draw, poisson_arrivals, tenant_names
from agentconsole.sample_traces.workloads.tools import WIKI_SEARCH

NAME = "wide-fanout"
SIZES = Sizes(
    output_median=90.0,
    output_sigma=0.5,
    output_range=(8, 512),
    result_median=250.0,
    result_sigma=0.6,
    result_range=(30, 1500),
)


def _level(b: ProgramBuilder, parent: str, width: int) -> str:
    """Expand ``parent`` into ``width`` children; returns the value node of the kept child."""
    best = b.draw.integer(0, width - 1)
    kept = parent
    for c in range(width):
        branch = Branch.MAIN if c == best else Branch.DISCARDED
        act = b.llm([parent], branch=branch)
        obs = b.tool([act], WIKI_SEARCH, branch=branch)
        value = b.llm([obs], output=b.tokens(30, 0.5, 4, 200), branch=branch)
        if c == best:
            kept = value
    return kept


def wide_fanout(
    n_programs: int = 20,
    rate: float = 0.5,
    seed: int = 0,
    *,
    tenants: int = 4,
    min_width: int = 4,
    max_width: int = 8,
    min_depth: int = 2,
    max_depth: int = 12,
    prefix_tokens: int = 1_000,
    p_timeout: float = 0.01,
    p_cancel: float = 0.01,
    deadline_slack: float | None = 4.0,
) -> list[TraceProgram]:
    """``n_programs`` tree searches arriving as a Poisson process of ``rate`` per second.

    Width and depth are drawn uniformly per level and per program. Raises ``ValueError`` for a
    negative size, a non-positive rate or an empty width/depth range.
    """
    check_request(n_programs, rate)
    if not 1 <= min_width <= max_width or not 1 <= min_depth <= max_depth:
        raise ValueError("need 1 <= min_width <= max_width and 1 <= min_depth <= max_depth")
    root = Draw(seed)
    arrivals = poisson_arrivals(root.child(), n_programs, rate)
    draw = root.child()
    names = tenant_names(tenants)
    faults = Faults(p_timeout=p_timeout, p_cancel=p_cancel, deadline_slack=deadline_slack)
    prefix = [PrefixSegment(id="platform/lats-hotpotqa", tokens=prefix_tokens, public=True)]
    programs = []
    for i, arrival in enumerate(arrivals):
        tenant = names[draw.integer(0, len(names) - 1)]
        b = ProgramBuilder(draw, SIZES, faults)
        node = b.llm([], prompt=b.tokens(150, 0.4, 20, 1000))
        for _ in range(draw.integer(min_depth, max_depth)):
            node = _level(b, node, draw.integer(min_width, max_width))
        b.llm([node], output=b.tokens(60, 0.5, 4, 400))
        programs.append(
            b.finish(
                program_id=program_id(NAME, seed, i),
                tenant=tenant,
                workload=NAME,
                shape="tree-search",
                arrival_s=arrival,
                prefix=prefix,
            )
        )
    return programs
