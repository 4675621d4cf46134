"""The context rule: prefix, ancestors' segments in listing order, then the node's own prompt."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentconsole.sample_traces import (
    LLMNode,
    Segment,
    TraceProgram,
    available_workloads,
    context_segments,
    context_tokens,
    generate,
    node_segments,
)

PREFIX = ["platform/sys", "tenant-a/profile"]


def keys(program: TraceProgram, node_id: str) -> list[str]:
    return [s.key for s in context_segments(program, node_id)]


def test_root_sees_prefix_and_own_prompt(program: TraceProgram) -> None:
    assert context_segments(program, "plan") == [
        Segment("platform/sys", 80_000, True),
        Segment("tenant-a/profile", 2_000, False),
        Segment("p1/plan/prompt", 500, False),
    ]


def test_join_sees_fanout_results_in_listing_order(program: TraceProgram) -> None:
    assert keys(program, "join") == [
        *PREFIX,
        "p1/plan/prompt",
        "p1/plan/out",
        "p1/s1/result",
        "p1/s2/result",
        "p1/join/prompt",
    ]
    assert context_tokens(program, "join") == 80_000 + 2_000 + 500 + 200 + 1_000 + 700 + 40


def test_repair_chain_excludes_discarded_sibling(program: TraceProgram) -> None:
    done = keys(program, "done")
    assert done[-5:] == [
        "p1/join/out",
        "p1/test/result",
        "p1/fix/prompt",
        "p1/fix/out",
        "p1/done/prompt",
    ]
    assert not any("spec" in k for k in done)
    assert keys(program, "spec")[-3:] == ["p1/join/prompt", "p1/join/out", "p1/spec/prompt"]


def test_tool_context_has_no_own_segment(program: TraceProgram) -> None:
    assert keys(program, "test") == [*keys(program, "join"), "p1/join/out"]


def test_only_prefix_segments_can_be_public(program: TraceProgram) -> None:
    for node in program.nodes:
        segs = context_segments(program, node.id)
        assert [s.public for s in segs[:2]] == [True, False]
        assert not any(s.public for s in segs[2:])


def test_unknown_node_is_a_key_error(program: TraceProgram) -> None:
    with pytest.raises(KeyError):
        context_segments(program, "missing")


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(available_workloads()), seed=st.integers(0, 2**32))
def test_single_parent_context_extends_the_parents(name: str, seed: int) -> None:
    """What a radix index relies on: a child's context = parent's context + parent's output
    (a ``compact`` call starts a fresh context instead; ``test_traces_compaction`` covers it)."""
    (program,) = generate(name, 1, 1.0, seed)
    for node in program.nodes:
        if len(node.parents) != 1 or (isinstance(node, LLMNode) and node.compact):
            continue
        parent = program.node(node.parents[0])
        expected = context_segments(program, parent.id)
        if isinstance(parent, LLMNode):
            expected = expected[:-1]  # the parent's own prompt is re-emitted by node_segments
        expected += node_segments(program, parent)
        if isinstance(node, LLMNode):
            expected.append(Segment(f"{program.id}/{node.id}/prompt", node.prompt_tokens, False))
        assert context_segments(program, node.id) == expected


@settings(max_examples=15, deadline=None)
@given(name=st.sampled_from(available_workloads()), seed=st.integers(0, 2**32))
def test_segment_keys_are_unique_within_a_context(name: str, seed: int) -> None:
    (program,) = generate(name, 1, 1.0, seed)
    for node in program.nodes:
        ks = keys(program, node.id)
        assert len(ks) == len(set(ks))
