"""``long-coding`` against the published figures it claims (fixed seeds, stated tolerances).

Targets (sample_traces/README.md): ~150K mean input per call of which a few K are new and >95%
cached (TraceLab: 154K, 96%), ~500 output tokens (523), log-normal steps with a heavy tail (p50
~17, p90 ~150, p99 ~1,000+), most tool calls sub-second but about half of tool time in calls of
1 s-10 min, subagents in ~40% of sessions, compaction just below the window.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable
from dataclasses import dataclass

import pytest

from agentconsole.sample_traces import (
    LLMNode,
    ToolNode,
    TraceProgram,
    context_segments,
    dumps_program,
    generate,
    loads_trace,
    validate_trace,
)

WINDOW = 400_000


@dataclass(frozen=True, slots=True)
class Call:
    node: LLMNode
    context: int  # tokens prefilled (cached or not)
    new: int  # tokens a perfect per-session prefix cache would not hold


def calls(program: TraceProgram) -> list[Call]:
    """Every LLM call with its context and new tokens. A block is cached when it was seen right
    after the same block before (a prefix-tree edge); the program prefix is warm.

    Contexts are built as the simulator builds them: along a chain a context is the parent's
    plus the parent's segments, a join of parallel tools adds the other tools' results, and
    only compact calls and subagent joins take :func:`context_segments` (``test_traces_context``
    and ``test_joins_match_the_context_rule`` check the shortcuts against it)."""
    seen: set[tuple[Hashable, Hashable]] = set()
    previous: Hashable = None
    for seg in program.prefix:
        seen.add((previous, seg.id))
        previous = seg.id
    # per node: the context its children inherit, and how many leading blocks are known seen
    through: dict[str, tuple[list[tuple[str, int]], int]] = {}
    out = []
    for node in program.nodes:
        segments, checked = _inherited(program, node, through)
        if isinstance(node, ToolNode):
            through[node.id] = (
                [*segments, (f"{program.id}/{node.id}/result", node.result_tokens)],
                checked,
            )
            continue
        segments = [*segments, (f"{program.id}/{node.id}/prompt", node.prompt_tokens)]
        path = [*segments, (f"{program.id}/{node.id}/out", node.output_tokens)]
        keys = [None, *(k for k, _ in path)]
        start = max(checked - 1, 0)
        edges = [(keys[i], keys[i + 1]) for i in range(start, len(path))]
        new = sum(t for (_, t), e in zip(segments[start:], edges, strict=False) if e not in seen)
        seen.update(edges)
        through[node.id] = (path, len(path))
        out.append(Call(node, sum(t for _, t in segments), new))
    return out


def _inherited(
    program: TraceProgram,
    node: LLMNode | ToolNode,
    through: dict[str, tuple[list[tuple[str, int]], int]],
) -> tuple[list[tuple[str, int]], int]:
    """The context ``node`` inherits (its own prompt left out) and its known-seen length."""
    if isinstance(node, LLMNode) and node.compact:
        return _general(program, node), 0
    if not node.parents:
        return _general(program, node), 0
    first, *rest = node.parents
    siblings = program.node(first).parents
    tools = [
        t for t in map(program.node, rest) if isinstance(t, ToolNode) and t.parents == siblings
    ]
    if len(tools) == len(rest):  # a chain, or a join of tools called together
        segments, checked = through[first]
        extra = [(f"{program.id}/{t.id}/result", t.result_tokens) for t in tools]
        return [*segments, *extra], checked
    return _general(program, node), 0


def _general(program: TraceProgram, node: LLMNode | ToolNode) -> list[tuple[str, int]]:
    segments = [(s.key, s.tokens) for s in context_segments(program, node.id)]
    return segments[:-1] if isinstance(node, LLMNode) else segments


def children(program: TraceProgram, node_id: str) -> list[str]:
    return [n.id for n in program.nodes if node_id in n.parents]


def compactions(program: TraceProgram) -> list[LLMNode]:
    """The summary calls: a compact call whose single parent has no other child."""
    out = []
    for node in program.nodes:
        if isinstance(node, LLMNode) and node.compact:
            (parent,) = node.parents
            if children(program, parent) == [node.id]:
                summary = program.node(parent)
                assert isinstance(summary, LLMNode)
                out.append(summary)
    return out


def spawns_subagents(program: TraceProgram) -> bool:
    return any(
        isinstance(n, LLMNode) and n.compact and len(children(program, n.parents[0])) > 1
        for n in program.nodes
    )


@pytest.fixture(scope="module")
def sessions() -> list[TraceProgram]:
    return generate("long-coding", 300, 0.01, 0)


@pytest.fixture(scope="module")
def by_session(sessions: list[TraceProgram]) -> dict[str, list[Call]]:
    return {p.id: calls(p) for p in sessions}


@pytest.fixture(scope="module")
def stats(by_session: dict[str, list[Call]]) -> list[Call]:
    return [c for session in by_session.values() for c in session]


def test_joins_match_the_context_rule(
    sessions: list[TraceProgram], by_session: dict[str, list[Call]]
) -> None:
    for program in sessions[:30]:
        by_id = {c.node.id: c for c in by_session[program.id]}
        for node in program.nodes:
            if isinstance(node, LLMNode) and len(node.parents) > 1:
                context = sum(s.tokens for s in context_segments(program, node.id))
                assert by_id[node.id].context == context


def test_input_is_long_mostly_cached_with_a_few_k_new(stats: list[Call]) -> None:
    mean_input = statistics.mean(c.context for c in stats)
    mean_new = statistics.mean(c.new for c in stats)
    assert 120_000 <= mean_input <= 180_000  # ~150K (TraceLab 154K)
    assert 1_500 <= mean_new <= 4_000  # "a few K"
    assert statistics.median(c.new for c in stats) < mean_new  # bursts: compactions, big reads
    assert sum(c.new for c in stats) / sum(c.context for c in stats) < 0.05  # >95% cached


def test_outputs_average_about_500_tokens(stats: list[Call]) -> None:
    outputs = [c.node.output_tokens for c in stats]
    assert 420 <= statistics.mean(outputs) <= 650  # TraceLab 523
    assert statistics.median(outputs) < statistics.mean(outputs)  # a long tail of big writes


def test_session_length_is_log_normal_with_a_heavy_tail(sessions: list[TraceProgram]) -> None:
    lengths = sorted(sum(isinstance(n, LLMNode) for n in p.nodes) for p in sessions)
    p50, p90, p99 = (lengths[int(q * len(lengths))] for q in (0.5, 0.9, 0.99))
    assert 12 <= p50 <= 45  # TraceLab ~17 main-thread steps; subagents and summaries add calls
    assert 100 <= p90 <= 400
    assert p99 >= 500
    assert statistics.mean(lengths) > 2 * p50


def test_tool_time_is_heavy_tailed(sessions: list[TraceProgram], stats: list[Call]) -> None:
    tools = [n for p in sessions for n in p.nodes if isinstance(n, ToolNode)]
    latencies = [t.duration_s for t in tools]
    total = sum(latencies)
    assert 1.05 <= len(tools) / len(stats) <= 1.35  # TraceLab 1.2 tool calls per step
    assert sum(x < 1.0 for x in latencies) / len(latencies) > 0.6  # most calls sub-second
    assert 0.4 <= sum(x for x in latencies if 1.0 <= x <= 600.0) / total <= 0.7  # about half
    assert sum(x for x in latencies if x < 1.0) / total < 0.05


def test_about_40_percent_of_sessions_spawn_subagents(sessions: list[TraceProgram]) -> None:
    share = sum(spawns_subagents(p) for p in sessions) / len(sessions)
    assert 0.32 <= share <= 0.48


def test_a_subagents_steps_stay_out_of_its_parents_context(sessions: list[TraceProgram]) -> None:
    checked = 0
    for program in (p for p in sessions if spawns_subagents(p)):
        for node in program.nodes:
            task, *reports = node.parents or ("",)
            if not reports or not isinstance(program.node(reports[0]), LLMNode):
                continue  # not a join of a task call and its subagents' last calls
            keys = {s.key for s in context_segments(program, node.id)}
            for report in reports:
                assert f"{program.id}/{report}/out" in keys
                assert f"{program.id}/{report}/prompt" not in keys
            assert f"{program.id}/{task}/out" in keys
            checked += 1
    assert checked > 50


def test_calls_fit_the_window_and_compaction_fires_just_below_it(
    sessions: list[TraceProgram], by_session: dict[str, list[Call]]
) -> None:
    compacted = 0
    for program in sessions:
        by_id = {c.node.id: c for c in by_session[program.id]}
        assert all(c.context + c.node.output_tokens <= WINDOW for c in by_id.values())
        summaries = compactions(program)
        compacted += bool(summaries)
        for summary in summaries:
            assert 0.85 * WINDOW <= by_id[summary.id].context <= WINDOW
            (after,) = children(program, summary.id)
            assert by_id[after].context < 0.25 * WINDOW
    assert 0.05 <= compacted / len(sessions) <= 0.25  # TraceLab: 9.7% of sessions compact


def test_a_claude_code_window_compacts_earlier_and_more_often() -> None:
    programs = generate("long-coding", 60, 0.01, 2, window_tokens=200_000)
    summaries = [s for p in programs for s in compactions(p)]
    assert len(summaries) > 20
    for program in programs:
        assert max(c.context + c.node.output_tokens for c in calls(program)) <= 200_000


def test_prefix_is_a_public_system_prompt_and_a_private_memory_file(
    sessions: list[TraceProgram],
) -> None:
    for p in sessions:
        system, memory = p.prefix
        assert (system.id, system.tokens, system.public) == (
            "platform/long-coding-system",
            16_000,
            True,
        )
        assert memory.id.startswith(f"{p.tenant}/repo-")
        assert (memory.tokens, memory.public) == (2_000, False)
    validate_trace(sessions)


def test_round_trip_and_determinism_with_compact_nodes(sessions: list[TraceProgram]) -> None:
    text = "".join(dumps_program(p) + "\n" for p in sessions[:40])
    assert '"compact":true' in text
    assert loads_trace(text) == sessions[:40]
    again = generate("long-coding", 40, 0.01, 0)
    assert "".join(dumps_program(p) + "\n" for p in again) == text
    other = generate("long-coding", 40, 0.01, 1)
    assert [p.nodes for p in other] != [p.nodes for p in again]


@pytest.mark.parametrize(
    "overrides",
    [{"window_tokens": 150_000}, {"max_steps": 2}, {"compact_reserve_tokens": 10_000}],
)
def test_impossible_parameters_are_value_errors(overrides: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"long-coding needs|too small"):
        generate("long-coding", 2, 0.01, 0, **overrides)
