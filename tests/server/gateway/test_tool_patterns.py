"""A tenant's tool schema cannot stall the server with its regular expressions: patterns are
matched by RE2, in time linear in the input, and a pattern RE2 cannot compile (a
backreference, lookaround) is refused at registration with the JSON pointer that holds it.

Python's ``re`` took 3.3 s for ``^(a+)+$`` against 27 ``a`` and a ``!`` (doubling with each
more), holding the GIL: every other tenant's call and ``/health`` waited, and at 40 characters
the process could only be killed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentconsole.server.gateway.errors import InvalidTool
from agentconsole.server.gateway.schema_rules import check_parameters_schema
from tests.server.api.harness import LiveServer, gateway_server
from tests.server.gateway.helpers import obj, tool_body

EVIL = "^(a+)+$"
ECHO = {"type": "builtin", "name": "echo"}


def _text(pattern: str) -> dict[str, Any]:
    return obj(text={"type": "string", "maxLength": 20_000, "pattern": pattern})


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        (_text(r"^(a)\1$"), "parameters/properties/text/pattern"),
        (_text("^(?=a)"), "parameters/properties/text/pattern"),
        (
            {**obj(), "patternProperties": {"(?<!x)y": {"type": "string"}}},
            "parameters/patternProperties",
        ),
        # where no value is admitted, a pattern is still matched: checked there too
        (
            {**obj(), "propertyNames": {"pattern": r"(\w)\1"}},
            "parameters/propertyNames/pattern",
        ),
        (
            obj(a={"type": "string", "not": {"pattern": "(?=b)"}}),
            "parameters/properties/a/not/pattern",
        ),
    ],
)
def test_a_pattern_re2_cannot_match_is_refused_where_it_is(
    schema: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidTool) as refused:
        check_parameters_schema(schema)
    assert refused.value.field == field
    assert "linear time" in refused.value.message


def test_a_pattern_anywhere_a_ref_may_reach_is_checked() -> None:
    schema = {**obj(a={"$ref": "#/x-hidden"}), "x-hidden": {"type": "string", "pattern": "(?=a)"}}
    with pytest.raises(InvalidTool) as refused:
        check_parameters_schema(schema)
    assert refused.value.field == "parameters/x-hidden/pattern"


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    schema = {
        **obj(),
        "patternProperties": {"^x-": {"type": "string"}},
        "unevaluatedProperties": False,
    }
    with pytest.raises(InvalidTool) as refused:
        check_parameters_schema(schema)
    assert refused.value.field == "parameters/unevaluatedProperties"


def test_additional_properties_are_told_by_re2_too() -> None:
    """``additionalProperties`` finds the properties no pattern names: by RE2, whose answer is
    the one ``patternProperties`` acted on (Python's found an Arabic-Indic digit a digit, so
    its value was neither checked by the pattern's schema nor refused as additional), and in
    linear time (Python's joined the patterns into one backtracking regex)."""
    digits = check_parameters_schema(
        {**obj(), "patternProperties": {r"^\d+$": {"type": "integer"}}}
    )
    assert digits.is_valid({"12": 3})
    assert not digits.is_valid({"12": "three"})
    assert not digits.is_valid({"\u0663": {"cmd": "rm -rf /"}})
    evil = check_parameters_schema({**obj(), "patternProperties": {EVIL: {"type": "string"}}})
    assert not evil.is_valid({"a" * 10_000 + "!": "x"})
    assert evil.is_valid({"a" * 10_000: "x"})
    # flags inside one pattern: Python refused the joined regex (a 500 on every call)
    flags = {"^x": {"type": "string"}, "(?i)^y": {"type": "string"}}
    mixed = check_parameters_schema({**obj(), "patternProperties": flags})
    assert mixed.is_valid({"Y1": "v", "x1": "w"})
    assert not mixed.is_valid({"z": "v"})


def test_patterns_and_pattern_properties_still_decide() -> None:
    schema = {
        **obj(account={"type": "string", "pattern": "^[a-z0-9-]+$"}),
        "patternProperties": {"^x-": {"type": "integer"}},
        "propertyNames": {"pattern": "^(account|x-.*)$"},
    }
    validator = check_parameters_schema(schema)
    assert validator.is_valid({"account": "team-7", "x-retries": 3})
    assert not validator.is_valid({"account": "Team 7"})
    assert not validator.is_valid({"x-retries": "three"})
    assert not validator.is_valid({"other": 1})


def test_patterns_are_matched_by_re2_not_by_python_s_backtracking_re() -> None:
    """JSON Schema's patterns are ECMA-262, whose ``\\d`` is ASCII, as RE2's; Python's
    matches an Arabic-Indic digit as well. Which one decides tells which engine matched."""
    validator = check_parameters_schema(_text(r"^\d+$"))
    assert validator.is_valid({"text": "2026"})
    assert not validator.is_valid({"text": "\u0663"})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with gateway_server(Path(tmp_path_factory.mktemp("redos")) / "redos.duckdb") as live:
        yield live


def test_a_catastrophic_pattern_answers_at_once_over_http(server: LiveServer) -> None:
    with server.client() as tenant:
        body = tool_body("rx", ECHO, parameters=_text(EVIL))
        assert tenant.post("/v1/tools", json=body).status_code == 201
        assert tenant.post("/v1/programs", json={"program_id": "rxp"}).status_code == 201
        call = {"program_id": "rxp", "node_id": "r1", "arguments": {"text": "a" * 10_000 + "!"}}
        started = time.monotonic()
        refused = tenant.post("/v1/tools/rx/call", json=call, timeout=30)
        # not a speed target: Python's re would not answer this before the client gives up
        assert time.monotonic() - started < 30
        assert refused.status_code == 422, refused.text
        matching = {**call, "node_id": "r2", "arguments": {"text": "a" * 10_000}}
        answered = tenant.post("/v1/tools/rx/call", json=matching, timeout=30)
        assert answered.status_code == 200, answered.text
        assert tenant.get("/health").status_code == 200


def test_a_pattern_re2_cannot_match_is_a_422_over_http(server: LiveServer) -> None:
    with server.client() as tenant:
        body = tool_body("backref", ECHO, parameters=_text(r"^(a)\1$"))
        refused = tenant.post("/v1/tools", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "parameters/properties/text/pattern"
        names = [tool["name"] for tool in tenant.get("/v1/tools").json()["tools"]]
        assert "backref" not in names
