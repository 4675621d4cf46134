"""``schema.json`` accepts every generated line and agrees with the parser on what it can tell."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import agentconsole.sample_traces as sample_traces
from agentconsole.sample_traces import (
    available_workloads,
    generate,
    load_schema,
    load_trace,
    program_to_dict,
)
from agentconsole.sample_traces.codec import dumps_program
from agentconsole.sample_traces.format import TRACE_TOOL_KINDS
from agentconsole.scheduler.program import Branch, NodeKind
from tests.sample_traces.trace_cases import BAD


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schema_is_2020_12_and_closed() -> None:
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    objects = [schema, *schema["$defs"].values()]
    closed = [d for d in objects if d.get("type") == "object"]
    assert len(closed) == 7
    assert all(d["additionalProperties"] is False for d in closed)


def test_the_schema_enums_are_the_formats_values() -> None:
    """The format's kinds are the scheduler's (its catch-all tool kind left out)."""
    defs = load_schema()["$defs"]
    assert defs["branch"]["enum"] == [b.value for b in Branch]
    tool_kinds = defs["tool_node"]["properties"]["tool_kind"]["enum"]
    assert tool_kinds == [k.value for k in TRACE_TOOL_KINDS]
    kinds = [defs[f"{k.value}_node"]["properties"]["kind"]["const"] for k in NodeKind]
    assert kinds == [k.value for k in NodeKind]
    outcomes = defs["attempt"]["properties"]["outcome"]["enum"]
    assert outcomes == [o.value for o in sample_traces.Outcome]


@pytest.mark.parametrize("name", available_workloads())
def test_every_workload_validates(name: str, validator: jsonschema.Draft202012Validator) -> None:
    for program in generate(name, 20, 1.0, 11):
        validator.validate(program_to_dict(program))


def test_committed_samples_validate(validator: jsonschema.Draft202012Validator) -> None:
    folder = Path(sample_traces.__file__).parent
    for name in ("seed-mix", "two-tenants"):
        for program in load_trace(folder / f"{name}.small.jsonl"):
            validator.validate(program_to_dict(program))


def test_handmade_validates(
    program_dict: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    validator.validate(program_dict)


@pytest.mark.parametrize("case", [c for c, spec in BAD.items() if spec[3]])
def test_schema_rejects_what_it_can_express(
    case: str, program_dict: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    bad = copy.deepcopy(program_dict)
    BAD[case][0](bad)
    assert not validator.is_valid(bad)


@pytest.mark.parametrize("case", [c for c, spec in BAD.items() if not spec[3]])
def test_cross_field_rules_are_beyond_the_schema(
    case: str, program_dict: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    """Documents the division of labour: these need ``parse_program``."""
    bad = copy.deepcopy(program_dict)
    BAD[case][0](bad)
    assert validator.is_valid(bad)


def test_compact_line_is_valid_json_for_the_schema(
    validator: jsonschema.Draft202012Validator,
) -> None:
    (program,) = generate("seed-mix", 1, 1.0, 0)
    validator.validate(json.loads(dumps_program(program)))
