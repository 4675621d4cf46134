"""Mid-prompt insertions in the trace format: where an ``insert`` puts its tokens, that later
calls see them there, the codec's round trip, and the ``coding-agent`` knob that makes them."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest

from agentconsole.sample_traces import (
    Insert,
    LLMNode,
    TraceProgram,
    context_segments,
    dumps_program,
    generate,
    load_schema,
    nominal_duration_s,
    parse_program,
    program_to_dict,
)
from tests.sample_traces.trace_cases import inserting_chain


def _chain(*, insert_after: str = "t/repo", compact_last: bool = False) -> TraceProgram:
    return inserting_chain(after=insert_after, tokens=300, compact_last=compact_last)


def _keys(program: TraceProgram, node_id: str) -> list[str]:
    return [s.key for s in context_segments(program, node_id)]


def test_an_insert_sits_after_its_prefix_segment_not_at_the_end() -> None:
    program = _chain()
    assert _keys(program, "a") == ["platform/sys", "t/repo", "p/a/prompt"]
    assert _keys(program, "b") == [
        "platform/sys",
        "t/repo",
        "p/b/insert",
        "p/a/prompt",
        "p/a/out",
        "p/r1/result",
        "p/b/prompt",
    ]
    assert context_segments(program, "b")[2].tokens == 300


def test_a_later_call_sees_the_inserted_tokens_where_they_were_inserted() -> None:
    """The next call extends the inserting call's context: a prefix cache reuses all of it."""
    program = _chain()
    b, c = context_segments(program, "b"), context_segments(program, "c")
    assert c[: len(b)] == b
    assert [s.key for s in c[len(b) :]] == ["p/b/out", "p/r2/result", "p/c/prompt"]
    # a tool's context (what its result is appended to) keeps the insertion too
    assert _keys(program, "r2")[2] == "p/b/insert"


def test_an_insert_in_the_middle_of_the_prefix_and_insertions_in_listing_order() -> None:
    program = _chain(insert_after="platform/sys")
    assert _keys(program, "b")[:3] == ["platform/sys", "p/b/insert", "t/repo"]
    nodes = (
        *program.nodes[:4],
        LLMNode(
            id="c",
            parents=("r2",),
            prompt_tokens=5,
            output_tokens=7,
            insert=Insert(after="platform/sys", tokens=50),
        ),
    )
    twice = replace(program, nodes=nodes)
    assert _keys(twice, "c")[:4] == ["platform/sys", "p/b/insert", "p/c/insert", "t/repo"]


def test_a_compact_call_leaves_history_insertions_behind() -> None:
    """Outside the compact call's scope only last segments cross: an ancestor's insertion is
    history, dropped with the rest."""
    program = _chain(compact_last=True)
    assert _keys(program, "c") == ["platform/sys", "t/repo", "p/r2/result", "p/c/prompt"]


def test_insert_must_name_a_prefix_segment_of_the_program() -> None:
    with pytest.raises(ValueError, match=r"nodes\[2\]\.insert\.after: 'nope' is not a prefix"):
        _chain(insert_after="nope")
    with pytest.raises(ValueError, match="tokens: must be >= 1"):
        Insert(after="platform/sys", tokens=0)


def test_codec_round_trip_writes_insert_only_when_set() -> None:
    program = _chain()
    line = dumps_program(program)
    assert parse_program(json.loads(line)) == program
    nodes = program_to_dict(program)["nodes"]
    assert nodes[2]["insert"] == {"after": "t/repo", "tokens": 300}
    assert all("insert" not in n for i, n in enumerate(nodes) if i != 2)
    jsonschema.Draft202012Validator(load_schema()).validate(json.loads(line))


def test_nominal_life_pays_for_the_inserted_tokens() -> None:
    plain = replace(
        _chain(),
        nodes=tuple(
            LLMNode(id=n.id, parents=n.parents, prompt_tokens=20, output_tokens=100)
            if n.id == "b"
            else n
            for n in _chain().nodes
        ),
    )
    assert nominal_duration_s(_chain()) == pytest.approx(nominal_duration_s(plain) + 300 / 8000)


def test_coding_agent_without_the_knob_is_unchanged() -> None:
    """``p_insert=0`` takes no draw: the trace is byte for byte the one without the knob."""
    default = [dumps_program(p) for p in generate("coding-agent", 15, 0.2, 3)]
    off = [dumps_program(p) for p in generate("coding-agent", 15, 0.2, 3, p_insert=0.0)]
    assert off == default
    assert all('"insert"' not in line for line in default)


def test_coding_agent_inserts_memory_after_its_repository_prefix() -> None:
    programs = generate("coding-agent", 30, 0.2, 5, p_insert=0.4, insert_tokens=2_000)
    assert programs == generate("coding-agent", 30, 0.2, 5, p_insert=0.4, insert_tokens=2_000)
    calls = [n for p in programs for n in p.nodes if isinstance(n, LLMNode)]
    inserting = [n for n in calls if n.insert is not None]
    non_root = [n for n in calls if n.parents]
    assert 0.3 < len(inserting) / len(non_root) < 0.5
    assert all(n.parents for n in inserting)  # the first call has nothing to insert before
    for program in programs:
        for node in program.nodes:
            if isinstance(node, LLMNode) and node.insert is not None:
                assert node.insert.after == program.prefix[-1].id  # the repo, before history
                assert 200 <= node.insert.tokens <= 16_000
    sizes = sorted(n.insert.tokens for n in inserting if n.insert is not None)
    assert 1_500 < sizes[len(sizes) // 2] < 2_700  # the median asked for


@pytest.mark.parametrize("params", [{"p_insert": 1.5}, {"p_insert": -0.1}, {"insert_tokens": 0}])
def test_coding_agent_rejects_bad_insertion_knobs(params: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="p_insert"):
        generate("coding-agent", 2, 0.2, 0, **params)
