"""Statistical sanity of each workload against the figures it claims (fixed seeds, wide bands)."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter

import pytest

from agentconsole.sample_traces import (
    Branch,
    LLMNode,
    Outcome,
    ToolKind,
    ToolNode,
    TraceProgram,
    context_tokens,
    generate,
)


def tools(programs: list[TraceProgram]) -> list[ToolNode]:
    return [n for p in programs for n in p.nodes if isinstance(n, ToolNode)]


def llms(programs: list[TraceProgram]) -> list[LLMNode]:
    return [n for p in programs for n in p.nodes if isinstance(n, LLMNode)]


@pytest.fixture(scope="module", params=[0, 1])
def seed_mix(request: pytest.FixtureRequest) -> list[TraceProgram]:
    seed: int = request.param
    return generate("seed-mix", 2_000, 2.0, seed)


def test_seed_mix_has_the_three_classes_in_equal_thirds(seed_mix: list[TraceProgram]) -> None:
    shares = Counter(p.shape for p in seed_mix)
    assert set(shares) == {"serial", "fanout", "repair"}
    assert all(0.28 < c / len(seed_mix) < 0.39 for c in shares.values())


def test_seed_mix_about_one_percent_timeouts_and_cancels(seed_mix: list[TraceProgram]) -> None:
    attempts = [a for t in tools(seed_mix) for a in t.attempts]
    timeouts = sum(a.outcome is Outcome.TIMEOUT for a in attempts)
    assert len(attempts) > 10_000
    assert 0.006 < timeouts / len(attempts) < 0.014
    assert 8 <= sum(p.cancel_at_s is not None for p in seed_mix) <= 36


def test_seed_mix_tool_latency_range(seed_mix: list[TraceProgram]) -> None:
    latencies = [a.latency_s for t in tools(seed_mix) for a in t.attempts]
    assert min(latencies) >= 0.05
    assert max(latencies) <= 10.0
    by_kind: dict[ToolKind, list[float]] = {}
    for t in tools(seed_mix):
        by_kind.setdefault(t.tool_kind, []).extend(
            a.latency_s for a in t.attempts if a.outcome is not Outcome.TIMEOUT
        )
    bands = {
        ToolKind.SEARCH: (0.3, 1.0),
        ToolKind.TEST_RUN: (2.0, 10.0),
        ToolKind.CODE_EXEC: (0.1, 3.0),
        ToolKind.FILE: (0.05, 0.3),
    }
    for kind, (lo, hi) in bands.items():
        xs = sorted(by_kind[kind])
        assert lo <= xs[len(xs) // 2] <= hi
        assert sum(lo <= x <= hi for x in xs) / len(xs) > 0.85


def test_seed_mix_prefix_and_tenants(seed_mix: list[TraceProgram]) -> None:
    for p in seed_mix:
        shared, private, task = p.prefix
        assert (shared.id, shared.tokens, shared.public) == ("platform/agent-system", 16_000, True)
        assert (private.id, private.tokens, private.public) == (f"{p.tenant}/profile", 2_000, False)
        assert (task.id, task.tokens, task.public) == (f"{p.id}/task", 62_000, False)
        assert sum(s.tokens for s in p.prefix) == 80_000  # the seed's "80K shared prefix"
    shares = Counter(p.tenant for p in seed_mix)
    assert len(shares) == 4
    assert all(0.2 < c / len(seed_mix) < 0.3 for c in shares.values())


def test_seed_mix_token_sizes(seed_mix: list[TraceProgram]) -> None:
    outputs = [n.output_tokens for n in llms(seed_mix)]
    assert 200 <= statistics.median(outputs) <= 300
    results = [t.result_tokens for t in tools(seed_mix)]
    assert min(results) >= 300
    assert max(results) <= 4_000


def test_seed_mix_shapes_are_what_they_say(seed_mix: list[TraceProgram]) -> None:
    second_repairs = 0
    repairs = [p for p in seed_mix if p.shape == "repair"]
    for p in seed_mix:
        calls = [n for n in p.nodes if isinstance(n, LLMNode)]
        if p.shape == "serial":
            assert len(calls) == 10
            assert all(len(n.parents) <= 1 for n in p.nodes)
        elif p.shape == "fanout":
            joins = [n for n in calls if len(n.parents) == 4]
            assert len(joins) == 2
        else:
            tests = [n for n in p.nodes if isinstance(n, ToolNode) and n.tool == "run_tests"]
            assert tests[0].outcome is Outcome.FAIL or tests[0].outcome is Outcome.TIMEOUT
            assert tests[-1].branch is Branch.REPAIR
            fixes = [n for n in calls if n.branch is Branch.REPAIR]
            assert [n.parents for n in fixes[:1]] == [(tests[0].id,)]
            second_repairs += len(fixes) == 2
    assert 0.2 < second_repairs / len(repairs) < 0.4


def test_seed_mix_arrivals_are_poisson_at_the_rate(seed_mix: list[TraceProgram]) -> None:
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(seed_mix)]
    assert statistics.mean(gaps) == pytest.approx(0.5, rel=0.1)
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, abs=0.1)


def test_coding_agent_matches_section_16() -> None:
    programs = generate("coding-agent", 500, 0.5, 0)
    for p in programs:
        assert [(s.tokens, s.public) for s in p.prefix] == [(15_000, True), (60_000, False)]
        assert sum(isinstance(n, LLMNode) for n in p.nodes) == 13
        final = p.nodes[-1]
        assert isinstance(final, LLMNode)
        assert final.output_tokens < 400
    first = [context_tokens(p, p.nodes[0].id) for p in programs]
    assert 78_000 < statistics.median(first) < 82_000
    assert 190 <= statistics.median(n.output_tokens for n in llms(programs)) <= 250
    assert 1_500 <= statistics.median(t.result_tokens for t in tools(programs)) <= 2_200
    kinds = {t.tool_kind for t in tools(programs)}
    assert kinds == {ToolKind.SEARCH, ToolKind.TEST_RUN, ToolKind.CODE_EXEC, ToolKind.FILE}
    repaired = sum(any(n.branch is Branch.REPAIR for n in p.nodes) for p in programs)
    assert 0.5 < repaired / len(programs) < 0.7


def test_two_tenants_heavy_is_bursty_and_dominant() -> None:
    programs = generate("two-tenants", 2_000, 2.0, 0)
    by_tenant = {
        t: [p.arrival_s for p in programs if p.tenant == t]
        for t in ("tenant-heavy", "tenant-light")
    }
    assert 0.85 < len(by_tenant["tenant-heavy"]) / len(programs) < 0.95

    def cv(xs: list[float]) -> float:
        gaps = [b - a for a, b in itertools.pairwise(xs)]
        return statistics.stdev(gaps) / statistics.mean(gaps)

    assert cv(by_tenant["tenant-heavy"]) > 2.0
    assert 0.8 < cv(by_tenant["tenant-light"]) < 1.2
    assert len(programs) / programs[-1].arrival_s == pytest.approx(2.0, rel=0.25)


def test_wide_fanout_is_a_tree_search_with_discarded_branches() -> None:
    programs = generate("wide-fanout", 300, 1.0, 0)
    calls = [sum(isinstance(n, LLMNode) for n in p.nodes) for p in programs]
    assert min(calls) >= 18
    assert max(calls) <= 210
    assert 60 < statistics.mean(calls) < 110
    for p in programs:
        children: Counter[str] = Counter(
            n.parents[0]
            for n in p.nodes
            if isinstance(n, LLMNode) and n.parents and isinstance(p.node(n.parents[0]), LLMNode)
        )
        widths = [c for c in children.values() if c > 1]
        assert widths
        assert all(4 <= w <= 8 for w in widths)
        discarded = [n for n in p.nodes if n.branch is Branch.DISCARDED]
        assert len(discarded) >= 3 * 3 * len(widths)
    outputs = [n.output_tokens for n in llms(programs)]
    assert 50 < statistics.mean(outputs) < 90
