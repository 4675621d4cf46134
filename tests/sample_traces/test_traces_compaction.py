"""``compact`` LLM nodes: a fresh context for compactions and subagents, in the rule and on disk."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from agentconsole.sample_traces import (
    LLMNode,
    PrefixSegment,
    TraceError,
    TraceProgram,
    available_workloads,
    context_segments,
    dumps_program,
    generate,
    load_schema,
    parse_program,
    program_to_dict,
)
from agentconsole.sample_traces.scopes import ROOT, context_members, node_scopes
from tests.sample_traces.trace_cases import tool_node


def _llm(node_id: str, *parents: str, prompt: int, out: int, compact: bool = False) -> LLMNode:
    return LLMNode(
        id=node_id, parents=parents, prompt_tokens=prompt, output_tokens=out, compact=compact
    )


def session() -> TraceProgram:
    """n2 spawns a subagent (s3..s5) whose report joins n6; z7 summarizes, c8 continues."""
    return TraceProgram(
        id="p",
        tenant="t",
        workload="unit",
        shape="coding-session",
        arrival_s=0.0,
        prefix=(
            PrefixSegment(id="sys", tokens=1000, public=True),
            PrefixSegment(id="mem", tokens=100),
        ),
        nodes=(
            _llm("n0", prompt=10, out=20),
            tool_node("t1", "n0", 30),
            _llm("n2", "t1", prompt=1, out=40),
            _llm("s3", "n2", prompt=50, out=5, compact=True),
            tool_node("t4", "s3", 60),
            _llm("s5", "t4", prompt=2, out=70),
            _llm("n6", "n2", "s5", prompt=3, out=8),
            _llm("z7", "n6", prompt=4, out=90),
            _llm("c8", "z7", prompt=100, out=9, compact=True),
            tool_node("t9", "c8", 11),
            _llm("n10", "t9", prompt=5, out=6),
        ),
    )


def keys(program: TraceProgram, node_id: str) -> list[str]:
    return [s.key.removeprefix("p/") for s in context_segments(program, node_id)]


def test_a_subagent_starts_fresh_from_its_task_and_only_its_report_joins() -> None:
    p = session()
    assert keys(p, "s3") == ["sys", "mem", "n2/out", "s3/prompt"]
    assert keys(p, "s5") == [
        "sys",
        "mem",
        "n2/out",
        "s3/prompt",
        "s3/out",
        "t4/result",
        "s5/prompt",
    ]
    history = ["sys", "mem", "n0/prompt", "n0/out", "t1/result", "n2/prompt", "n2/out"]
    assert keys(p, "n6") == [*history, "s5/out", "n6/prompt"]


def test_a_compaction_continues_from_the_summary_and_drops_the_history() -> None:
    p = session()
    assert keys(p, "z7")[-3:] == ["n6/prompt", "n6/out", "z7/prompt"]  # summarizes it all
    assert keys(p, "c8") == ["sys", "mem", "z7/out", "c8/prompt"]
    assert keys(p, "t9") == ["sys", "mem", "z7/out", "c8/prompt", "c8/out"]
    assert keys(p, "n10") == [*keys(p, "t9"), "t9/result", "n10/prompt"]
    assert [n.id for n, whole in p.context_sources("n10") if not whole] == ["z7"]


def test_scopes_nest_and_joins_return_to_the_enclosing_scope() -> None:
    # 0 root; 1 compact child of 0; 2 under 1; 3 compact (a compaction inside 1's scope);
    # 4 under 3; 5 joins 0 and 4 -> back in ROOT; 6 joins 2 and 4 -> in 1's scope
    parents = [[], [0], [1], [2], [3], [0, 4], [2, 4]]
    compact = [False, True, False, True, False, False, False]
    assert node_scopes(parents, compact) == (ROOT, 1, 1, 3, 3, ROOT, 1)
    scopes = node_scopes(parents, compact)
    assert context_members(parents, scopes, 5) == [(0, True), (4, False)]
    assert context_members(parents, scopes, 4) == [(2, False), (3, True)]
    assert context_members(parents, scopes, 6) == [(0, False), (1, True), (2, True), (4, False)]


def test_parallel_subagents_join_without_their_internals() -> None:
    p = TraceProgram(
        id="p",
        tenant="t",
        workload="unit",
        shape="fanout",
        arrival_s=0.0,
        nodes=(
            _llm("task", prompt=10, out=20),
            _llm("a1", "task", prompt=5, out=6, compact=True),
            _llm("a2", "a1", prompt=1, out=7),
            _llm("b1", "task", prompt=5, out=8, compact=True),
            _llm("join", "a2", "b1", prompt=2, out=3),
        ),
    )
    assert keys(p, "join") == ["task/prompt", "task/out", "a2/out", "b1/out", "join/prompt"]


def test_compact_round_trips_is_written_only_when_set_and_validates() -> None:
    p = session()
    line = dumps_program(p)
    assert line.count('"compact":true') == 2
    assert parse_program(json.loads(line)) == p
    jsonschema.Draft202012Validator(load_schema()).validate(program_to_dict(p))
    plain = generate("seed-mix", 5, 1.0, 0)
    assert all('"compact"' not in dumps_program(q) for q in plain)


def test_compact_must_be_a_boolean() -> None:
    data: dict[str, Any] = program_to_dict(session())
    data["nodes"][3]["compact"] = 1
    with pytest.raises(TraceError, match=r"nodes\[3\]\.compact: expected true or false"):
        parse_program(data)


@pytest.mark.parametrize("name", [n for n in available_workloads() if n != "long-coding"])
def test_workloads_without_compact_nodes_keep_the_plain_rule(name: str) -> None:
    for program in generate(name, 5, 1.0, 3):
        for node in program.nodes:
            sources = program.context_sources(node.id)
            assert [n for n, _ in sources] == program.ancestors(node.id)
            assert all(whole for _, whole in sources)
