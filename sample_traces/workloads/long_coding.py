"""``long-coding``: long-horizon coding sessions shaped like published Claude Code / Codex use.

Figures and where they come from (``sample_traces/README.md`` has the table):

* Steps (LLM calls of the main thread) per session: log-normal, median 17, log-sd 1.77,
  truncated to [1, 1500]: p50 ~19, mean ~68, p90 ~165, p99 ~800. TraceLab (Zhu et al., "TraceLab:
  Characterizing Coding Agent Workloads for LLM Serving", arXiv 2606.30560; 4,265 real sessions,
  357,161 steps; ``session_internal_counts``): per session 8.9 user- plus 73.6 tool-initiated
  steps, p50 1 + 15, p90 17 + 135, p99 129 + 1,107. 11% of steps follow a user turn (8.9/82.5).
* Tool calls per step 1.2 (p50 1, p90 2, p99 4) and the tool latency mix: TraceLab
  (``tool_latency_distribution``; see :mod:`.coding_tools`).
* Output tokens per call: log-normal median 265, log-sd 1.1 (mean ~520): TraceLab's 186.9M
  output tokens over 357,161 steps (~523 per step).
* Context: a 16K public system prompt + tool schemas (Claude Code's ``/context``: system 2.5K,
  tools 13.3K; SemiAnalysis ``cc-traces``: tools 12.4-13K, system 2.8-4.2K), a 2K private
  memory file per tenant repository, then each step appends its tool results, the previous
  output and a short turn prompt (~2.5K per step, "a few hundred to a few thousand new tokens
  per turn": vLLM x Mooncake, May 2026). TraceLab: 154K mean input per step (54.9B / 357,161),
  96% of it read from cache.
* Compaction (Claude Code's rule, from its source as analysed in "Harness engineering from
  Claude Code", ch. 9-10): when the next call's context reaches the window minus 33K (20K
  reserved for the summary, 13K buffer; 167K of a 200K window), one call summarizes the history
  (a ~1.2K instruction, a summary of median 6K, at most 20K) and the next call is ``compact``:
  it continues from the summary plus restored recent files (median 12K, at most 5 x 5K files
  within a 50K budget). ``window_tokens`` defaults to 400K, a calibration rather than one
  product's window: it reproduces TraceLab's 154K mean input per step and its 9.7% of sessions
  that compact, a pool of Claude (200K and 1M windows) and Codex (GPT-5: 400K, of which up to
  128K output) sessions; at Claude Code's 200K the mean input drops to ~85K and ~25% compact.
* Subagents in 40% of sessions (issue 12's figure, from AgentX: 44%, as summarized by the
  filer; no primary source was found): a session spawns ``~steps/100`` times (at least once),
  1-4 subagents in parallel, each a child chain whose first call is ``compact`` (a fresh context:
  the prefix, the parent's Task call, its own task prompt of ~2K), exploring for a median 8
  calls (no published figure found) with read-only tools, and whose final report (~1.2K) joins
  the parent's next call. Dynamo's agentic-inference blog (March 2026) reports Claude Code
  sessions of hundreds of calls, 85-97% cache hits per call and agent teams of 4.

Not modelled: the human think time between a session's requests (the format has no human
node; TraceLab's sessions span hours of it), reasoning tokens apart from output, and caches
shared across sessions beyond the public system prompt and the tenant's memory file.
"""

from __future__ import annotations

from agentconsole.sample_traces.format import PrefixSegment, TraceProgram
from agentconsole.sample_traces.workloads.builder import Faults, Sizes, check_request, program_id
from agentconsole.sample_traces.workloads.sampling import Draw, poisson_arrivals, tenant_names
from agentconsole.sample_traces.workloads.session import Knobs, Session

NAME = "long-coding"


def long_coding(
    n_programs: int = 20,
    rate: float = 0.005,
    seed: int = 0,
    *,
    tenants: int = 4,
    repos_per_tenant: int = 2,
    system_tokens: int = 16_000,
    memory_tokens: int = 2_000,
    steps_median: float = 17.0,
    steps_sigma: float = 1.77,
    max_steps: int = 1500,
    p_user_turn: float = 0.11,
    window_tokens: int = 400_000,
    compact_reserve_tokens: int = 33_000,
    p_subagents: float = 0.4,
    subagent_steps_median: float = 8.0,
    p_timeout: float = 0.005,
    p_cancel: float = 0.01,
    deadline_slack: float | None = 4.0,
) -> list[TraceProgram]:
    """``n_programs`` coding sessions arriving as a Poisson process of ``rate`` per second.

    Raises ``ValueError`` for a negative size, a non-positive rate, ``max_steps < 3`` or a
    window too small for the prefix, the reserve and what a compaction restores (at least
    prefix + ``compact_reserve_tokens`` + 120K).
    """
    check_request(n_programs, rate)
    prefix_tokens = system_tokens + memory_tokens
    if max_steps < 3 or repos_per_tenant < 1 or compact_reserve_tokens < 25_000:
        raise ValueError(
            "long-coding needs max_steps >= 3, repos_per_tenant >= 1 and "
            "compact_reserve_tokens >= 25000 (a summary of up to 20K must fit)"
        )
    smallest = prefix_tokens + compact_reserve_tokens + 120_000
    if window_tokens < smallest:
        raise ValueError(
            f"window_tokens={window_tokens} is too small for a {prefix_tokens}-token prefix "
            f"and compactions (needs >= {smallest})"
        )
    knobs = Knobs(
        window_tokens=window_tokens,
        compact_at=window_tokens - compact_reserve_tokens,
        prefix_tokens=prefix_tokens,
        p_user_turn=p_user_turn,
        subagent_steps_median=subagent_steps_median,
        p_timeout=p_timeout,
    )
    root = Draw(seed)
    arrivals = poisson_arrivals(root.child(), n_programs, rate)
    draw = root.child()
    names = tenant_names(tenants)
    faults = Faults(p_timeout=p_timeout, p_cancel=p_cancel, deadline_slack=deadline_slack)
    system = PrefixSegment(id="platform/long-coding-system", tokens=system_tokens, public=True)
    programs = []
    for i, arrival in enumerate(arrivals):
        tenant = names[draw.integer(0, len(names) - 1)]
        repo = draw.integer(0, repos_per_tenant - 1)
        memory = PrefixSegment(id=f"{tenant}/repo-{repo}/memory", tokens=memory_tokens)
        steps = round(draw.lognormal(steps_median, steps_sigma, 1, max_steps))
        spawns = 0
        if draw.chance(p_subagents):
            steps = max(steps, 3)  # spawn, join, answer
            spawns = min(draw.geometric(max(1.0, steps / 100)), steps // 3)
        session = Session(draw, Sizes(), faults, knobs)
        session.run(steps, spawns)
        programs.append(
            session.finish(
                program_id=program_id(NAME, seed, i),
                tenant=tenant,
                workload=NAME,
                shape="coding-session",
                arrival_s=arrival,
                prefix=[system, memory] if memory_tokens else [system],
            )
        )
    return programs
