"""The tools of the ``long-coding`` workload: what a Claude Code / Codex session calls, how long
each call takes and how much it returns.

Latency per tool is log-normal with the stated 5th/95th percentiles, truncated to
[``MIN_LATENCY_S``, the tool's timeout]; unlike :mod:`~agentconsole.sample_traces.workloads.tools`
there is no 10 s cap, because real coding-agent tool time is heavy-tailed (TraceLab,
arXiv 2606.30560, ``tool_latency_distribution``: median call 125 ms for Claude Code and 626 ms
for Codex, yet most tool *time* sits in the 1 s-10 min bins, Claude ~53% in 1-10 min). Weights
follow TraceLab's tool mix (file reads/edits, search, shell, tests; ~1.2 calls per step); the
rare ``long_command`` (builds, long suites, background jobs the agent waits on) carries the
multi-minute tail. ``bash`` is a side effect without an idempotency key, so it is never retried
(Claude Code does not re-run a timed-out command); reads are retried after a timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentconsole.sample_traces.format import Branch, Outcome, ToolAttempt, ToolNode
from agentconsole.sample_traces.workloads.sampling import Draw
from agentconsole.scheduler.program import ToolKind, ToolSpec

MIN_LATENCY_S = 0.005
MAX_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class CodingTool:
    """One tool: its spec, share of calls, latency p5/p95 (s), timeout, result size, failures."""

    spec: ToolSpec
    weight: float
    p5_s: float
    p95_s: float
    timeout_s: float
    result_median: float
    result_sigma: float
    result_max: int
    #: share of calls that end ``fail`` (a non-zero exit, a failing test)
    p_fail: float = 0.0


def _tool(name: str, kind: ToolKind, *, effect: bool = False, idempotent: bool = True) -> ToolSpec:
    return ToolSpec(name, kind, side_effect=effect, idempotent=idempotent)


READ = _tool("read_file", ToolKind.FILE)
EDIT = _tool("edit_file", ToolKind.FILE, effect=True)
GREP = _tool("grep", ToolKind.SEARCH)
BASH = _tool("bash", ToolKind.CODE_EXEC, effect=True, idempotent=False)
TESTS = _tool("run_tests", ToolKind.TEST_RUN)
FETCH = _tool("web_fetch", ToolKind.HTTP)
LONG = _tool("long_command", ToolKind.CODE_EXEC, effect=True, idempotent=False)

#: The main session's tools. Read results are capped at 25K tokens (Claude Code's Read limit).
SESSION_TOOLS: tuple[CodingTool, ...] = (
    CodingTool(READ, 0.30, 0.01, 0.3, 30.0, 2000, 1.0, 25_000),
    CodingTool(EDIT, 0.17, 0.02, 0.5, 30.0, 150, 0.8, 4_000, p_fail=0.03),
    CodingTool(GREP, 0.13, 0.03, 1.5, 60.0, 800, 1.0, 20_000),
    CodingTool(BASH, 0.29, 0.05, 60.0, 600.0, 700, 1.2, 25_000, p_fail=0.12),
    CodingTool(TESTS, 0.075, 3.0, 300.0, 600.0, 1500, 1.0, 25_000, p_fail=0.35),
    CodingTool(FETCH, 0.03, 0.5, 10.0, 60.0, 3000, 0.8, 20_000),
    CodingTool(LONG, 0.005, 600.0, 3000.0, 3600.0, 800, 1.0, 20_000, p_fail=0.2),
)
#: A subagent explores: reads, searches and read-only shell, no edits and no long jobs.
SUBAGENT_TOOLS: tuple[CodingTool, ...] = (
    CodingTool(READ, 0.50, 0.01, 0.3, 30.0, 2000, 1.0, 25_000),
    CodingTool(GREP, 0.32, 0.03, 1.5, 60.0, 800, 1.0, 20_000),
    CodingTool(BASH, 0.15, 0.05, 20.0, 600.0, 700, 1.2, 25_000, p_fail=0.1),
    CodingTool(FETCH, 0.03, 0.5, 10.0, 60.0, 3000, 0.8, 20_000),
)
#: P(1, 2, 3, 4 tool calls in a step that calls tools): with the steps that call none (user
#: turns, subagent joins) ~1.2 per step, as TraceLab reports (p50 1, p90 2, p99 4).
CALLS_PER_STEP = (0.74, 0.17, 0.06, 0.03)


def pick_tool(draw: Draw, table: Sequence[CodingTool]) -> CodingTool:
    return table[draw.pick([t.weight for t in table])]


def coding_tool_node(
    draw: Draw,
    tool: CodingTool,
    *,
    node_id: str,
    parents: Sequence[str],
    p_timeout: float,
    result_cap: int,
) -> ToolNode:
    """One recorded call of ``tool``: its attempts and a result of at most ``result_cap``."""
    limit = MAX_ATTEMPTS if tool.spec.auto_retry_safe else 1
    outcome = Outcome.FAIL if draw.chance(tool.p_fail) else Outcome.OK
    attempts: list[ToolAttempt] = []
    while len(attempts) < limit:
        if draw.chance(p_timeout):
            attempts.append(ToolAttempt(latency_s=tool.timeout_s, outcome=Outcome.TIMEOUT))
            continue
        latency = draw.spread(tool.p5_s, tool.p95_s, MIN_LATENCY_S, tool.timeout_s)
        attempts.append(ToolAttempt(latency_s=round(latency, 3), outcome=outcome))
        break
    drawn = round(draw.lognormal(tool.result_median, tool.result_sigma, 1, tool.result_max))
    return ToolNode(
        id=node_id,
        parents=tuple(parents),
        branch=Branch.MAIN,
        tool=tool.spec.name,
        tool_kind=tool.spec.kind,
        side_effect=tool.spec.side_effect,
        idempotent=tool.spec.idempotent,
        timeout_s=tool.timeout_s,
        result_tokens=max(0, min(drawn, result_cap)),
        attempts=tuple(attempts),
    )
