"""Per-tool-kind latency, timeout and result-size profiles, and the named tools workloads use
(the scheduler's :class:`~agentconsole.scheduler.program.ToolSpec`: name, kind, retry semantics).

Latencies are log-normal with the stated 5th/95th percentiles, truncated to
[``MIN_LATENCY_S``, min(``MAX_LATENCY_S``, timeout)], following seed section 19 (50 ms to 10 s)
and the per-kind ranges of the workload issue; TraceLab and Continuum report that tool time is
heavy-tailed and predictable per tool (anchors report, section 3).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.scheduler.program import ToolKind, ToolSpec

MIN_LATENCY_S = 0.05
MAX_LATENCY_S = 10.0


@dataclass(frozen=True, slots=True)
class ToolProfile:
    """How one kind of tool behaves: latency p5/p95 (s), timeout (s), median result tokens."""

    p5_s: float
    p95_s: float
    timeout_s: float
    result_median: float


PROFILES: dict[ToolKind, ToolProfile] = {
    ToolKind.FILE: ToolProfile(0.05, 0.3, 1.0, 1500),
    ToolKind.SEARCH: ToolProfile(0.3, 1.0, 5.0, 1200),
    ToolKind.CODE_EXEC: ToolProfile(0.1, 3.0, 8.0, 600),
    ToolKind.TEST_RUN: ToolProfile(2.0, 10.0, 10.0, 1500),
    ToolKind.BROWSER: ToolProfile(0.5, 6.0, 10.0, 2500),
    ToolKind.DATABASE: ToolProfile(0.05, 1.5, 5.0, 800),
    ToolKind.HTTP: ToolProfile(0.1, 3.0, 5.0, 700),
}


WEB_SEARCH = ToolSpec("web_search", ToolKind.SEARCH)
CODE_SEARCH = ToolSpec("code_search", ToolKind.SEARCH)
READ_FILE = ToolSpec("read_file", ToolKind.FILE)
APPLY_PATCH = ToolSpec("apply_patch", ToolKind.FILE, side_effect=True, idempotent=True)
PYTHON = ToolSpec("python", ToolKind.CODE_EXEC)
RUN_TESTS = ToolSpec("run_tests", ToolKind.TEST_RUN)
BROWSE = ToolSpec("browse", ToolKind.BROWSER)
SQL_QUERY = ToolSpec("sql_query", ToolKind.DATABASE)
HTTP_GET = ToolSpec("http_get", ToolKind.HTTP)
#: A webhook/e-mail style call: it has an effect and no idempotency key, so it is never retried.
HTTP_POST = ToolSpec("http_post", ToolKind.HTTP, side_effect=True, idempotent=False)
WIKI_SEARCH = ToolSpec("wiki_search", ToolKind.SEARCH)
