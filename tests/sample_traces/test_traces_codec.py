"""JSONL round trips and the error messages of bad input (line and field named)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agentconsole.sample_traces import (
    Branch,
    LLMNode,
    Outcome,
    ToolNode,
    TraceError,
    TraceProgram,
    available_workloads,
    dump_trace,
    dumps_program,
    generate,
    load_trace,
    loads_trace,
    parse_program,
    program_to_dict,
)
from agentconsole.scheduler.program import Quotas, ToolKind
from tests.sample_traces.trace_cases import BAD


def test_handmade_program_parses_with_defaults(program: TraceProgram) -> None:
    plan, s1 = program.nodes[0], program.nodes[1]
    assert isinstance(plan, LLMNode)
    assert plan.parents == ()
    assert plan.branch is Branch.MAIN
    assert plan.model == "big"
    assert isinstance(s1, ToolNode)
    assert s1.side_effect is False
    assert s1.idempotent is True
    assert s1.outcome is Outcome.OK
    assert s1.duration_s == pytest.approx(5.4)
    assert program.quotas is not None
    assert program.quotas == Quotas(wall_time_s=600.0, tokens=500_000, tool_calls=20)


def test_every_quota_maps_to_the_schedulers_quotas(program_dict: dict[str, Any]) -> None:
    wire = {"max_total_tokens": 9, "max_tool_calls": 8, "max_concurrent_tools": 3,
            "max_branches": 2, "max_wall_s": 1.5}  # fmt: skip
    program_dict["quotas"] = wire
    program = parse_program(program_dict)
    assert program.quotas == Quotas(
        wall_time_s=1.5, tokens=9, tool_calls=8, branches=2, concurrent_tools=3
    )
    assert program_to_dict(program)["quotas"] == wire


def test_a_tool_node_built_in_code_cannot_be_of_the_catch_all_kind(program: TraceProgram) -> None:
    tool = program.nodes[1]
    assert isinstance(tool, ToolNode)
    with pytest.raises(TraceError, match="tool_kind: 'other' is not a trace's tool kind"):
        dataclasses.replace(tool, tool_kind=ToolKind.OTHER)


def test_handmade_round_trip(program: TraceProgram, tmp_path: Path) -> None:
    assert parse_program(program_to_dict(program)) == program
    path = tmp_path / "one.jsonl"
    dump_trace([program], path)
    assert load_trace(path) == [program]
    assert path.read_text().count("\n") == 1


@pytest.mark.parametrize("name", available_workloads())
def test_workload_round_trip(name: str, tmp_path: Path) -> None:
    programs = generate(name, 25, 2.0, 3)
    path = tmp_path / f"{name}.jsonl"
    dump_trace(programs, path)
    loaded = load_trace(path)
    assert loaded == programs
    assert [dumps_program(p) for p in loaded] == path.read_text().splitlines()


def test_null_optionals_equal_absent(program_dict: dict[str, Any]) -> None:
    for key in ("deadline_s", "cancel_at_s", "quotas"):
        program_dict[key] = None
    program_dict["nodes"][0]["model"] = None
    with_nulls = parse_program(program_dict)
    for key in ("deadline_s", "cancel_at_s", "quotas"):
        del program_dict[key]
    del program_dict["nodes"][0]["model"]
    assert parse_program(program_dict) == with_nulls
    assert "deadline_s" not in program_to_dict(with_nulls)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_names_the_field(case: str, program_dict: dict[str, Any]) -> None:
    mutate, field, words, _ = BAD[case]
    mutate(program_dict)
    with pytest.raises(TraceError) as info:
        parse_program(program_dict)
    assert info.value.field == field
    assert words in info.value.message
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize("case", ["cycle", "negative prompt tokens", "missing kind"])
def test_bad_line_is_named_in_files(
    case: str, program_dict: dict[str, Any], tmp_path: Path
) -> None:
    good = json.dumps(program_dict)
    bad = copy.deepcopy(program_dict)
    bad["id"] = "p2"
    BAD[case][0](bad)
    path = tmp_path / "t.jsonl"
    path.write_text(f"{good}\n\n{json.dumps(bad)}\n")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert info.value.line == 3
    assert str(info.value).startswith(f"line 3: {BAD[case][1]}: ")


def test_a_file_that_is_not_utf8_names_the_line(
    program_dict: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(json.dumps(program_dict).encode() + b'\n{"id": "caf\xe9"}\n')
    with pytest.raises(TraceError, match=r"^line 2: not UTF-8 text"):
        load_trace(path)


def test_not_an_object_and_bad_json() -> None:
    with pytest.raises(TraceError, match="expected an object, got list"):
        parse_program([1, 2])
    with pytest.raises(TraceError, match=r"^line 2: invalid JSON"):
        loads_trace("   \n{oops\n")


def _line(d: dict[str, Any]) -> str:
    return json.dumps(d)


def test_duplicate_program_ids_name_the_second_line(program_dict: dict[str, Any]) -> None:
    with pytest.raises(TraceError, match=r"^line 3: id: duplicate program id 'p1'"):
        loads_trace(f"{_line(program_dict)}\n\n{_line(program_dict)}\n")


def test_prefix_must_be_consistent_across_lines(program_dict: dict[str, Any]) -> None:
    other = copy.deepcopy(program_dict)
    other["id"] = "p2"
    other["prefix"][0]["tokens"] = 79_999
    with pytest.raises(TraceError, match=r"^line 2: prefix\[0\]: prefix 'platform/sys' differs"):
        loads_trace(f"{_line(program_dict)}\n{_line(other)}\n")


def test_private_prefix_is_not_shared_across_tenants(program_dict: dict[str, Any]) -> None:
    other = copy.deepcopy(program_dict)
    other["id"] = "p2"
    other["tenant"] = "tenant-b"
    with pytest.raises(TraceError, match=r"^line 2: prefix\[1\]\.public: private prefix"):
        loads_trace(f"{_line(program_dict)}\n{_line(other)}\n")
    other["prefix"] = other["prefix"][:1]  # the public one alone may be shared
    assert len(loads_trace(f"{_line(program_dict)}\n{_line(other)}\n")) == 2
