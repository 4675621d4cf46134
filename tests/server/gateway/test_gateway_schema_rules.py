"""Registration schemas must be strict 2020-12 objects closed at every level."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.server.gateway.errors import InvalidTool
from agentconsole.server.gateway.schema_rules import check_parameters_schema
from tests.server.gateway.helpers import obj

STRING = {"type": "string", "maxLength": 10}


def test_a_strict_nested_schema_is_accepted_and_compiled() -> None:
    schema = obj(
        ("a",),
        a=STRING,
        b={"type": "array", "items": obj(c={"type": "integer"})},
        d={"anyOf": [{"type": "null"}, obj(e=STRING)]},
        f={"$ref": "#/$defs/g"},
        g={"enum": [1, 2]},
    )
    schema["$defs"] = {"g": obj(h=STRING)}
    validator = check_parameters_schema(schema)
    assert validator.is_valid({"a": "x", "b": [{"c": 1}], "d": None, "f": {"h": "y"}})
    assert not validator.is_valid({"a": "x", "z": 1})


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ({"type": "object", "properties": {"a": STRING}}, "parameters"),
        ({"type": "object", "additionalProperties": True}, "parameters"),
        (obj(a={"type": "object"}), "parameters/properties/a"),
        (obj(a={"type": ["object", "null"], "properties": {}}), "parameters/properties/a"),
        (obj(a={"type": "array", "items": {"type": "object"}}), "parameters/properties/a/items"),
        (
            obj(a={"anyOf": [{"type": "string"}, {"properties": {}}]}),
            "parameters/properties/a/anyOf/1",
        ),
        (obj(a={}), "parameters/properties/a"),
        (obj(a=True), "parameters/properties/a"),
        (obj(a={"description": "anything"}), "parameters/properties/a"),
        ({**obj(), "$defs": {"x": {"type": "object"}}}, "parameters/$defs/x"),
        (
            {**obj(), "patternProperties": {"^x": {"type": "object"}}},
            "parameters/patternProperties/^x",
        ),
    ],
)
def test_an_object_that_is_not_closed_is_refused_naming_where(
    schema: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidTool) as info:
        check_parameters_schema(schema)
    assert info.value.field == field
    assert info.value.status == 422


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        [],
        "object",
        {**obj(), "$schema": "http://json-schema.org/draft-07/schema#"},
        obj(a={"type": "strang"}),
        obj(a={"$ref": "https://example.com/schema.json"}),
        obj(a={"type": "string", "maxLength": -1}),
    ],
)
def test_other_bad_schemas_are_refused(schema: Any) -> None:
    with pytest.raises(InvalidTool):
        check_parameters_schema(schema)


@pytest.mark.parametrize(
    ("ref", "extra", "field", "message"),
    [
        ("#/$defs/nope", {}, "parameters/properties/a/$ref", "points to nothing"),
        ("#/$comment", {"$comment": "c"}, "parameters/properties/a/$ref", "not a schema"),
        ("#/properties", {}, "parameters/properties", "accepts any value"),
        ("#nowhere", {}, "parameters/properties/a/$ref", "names no .anchor"),
        ("#/properties/a", {}, "parameters/properties/a/$ref", "loops back"),
        ("#/$defs/b", {"$defs": {"b": {"anyOf": [{"$ref": "#/$defs/b"}]}}}, "", "loops back"),
    ],
)
def test_a_reference_that_lands_on_no_closed_schema_or_loops_is_refused(
    ref: str, extra: dict[str, Any], field: str, message: str
) -> None:
    """Registered, each of these failed every call with a 500 (or, ``#/properties``,
    accepted an object with any properties)."""
    with pytest.raises(InvalidTool, match=message) as info:
        check_parameters_schema({**obj(a={"$ref": ref}), **extra})
    assert not field or info.value.field == field


def test_references_to_anchors_and_recursive_trees_are_accepted() -> None:
    tree = obj(value={"type": "integer"}, children={"type": "array", "items": {"$ref": "#"}})
    assert check_parameters_schema(tree).is_valid({"value": 1, "children": [{"value": 2}]})
    named = {**obj(a={"$ref": "#leaf"}), "$defs": {"leaf": {"$anchor": "leaf", **STRING}}}
    assert not check_parameters_schema(named).is_valid({"a": 3})
    data = obj(a={"const": {"$ref": "#/not/a/reference"}, "type": "object"})
    data["properties"]["a"]["additionalProperties"] = False
    check_parameters_schema(data)  # a const's "$ref" is a value's key, not a reference
    nested_id = {**obj(a={"$ref": "#/$defs/x"}), "$defs": {"x": {"$id": "x", **STRING}}}
    with pytest.raises(InvalidTool, match=r"\$id"):
        check_parameters_schema(nested_id)


def test_conditions_and_negations_may_stay_open() -> None:
    schema = obj(a=STRING)
    schema["not"] = {"required": ["b"]}
    schema["if"] = {"properties": {"a": {"const": "x"}}}
    schema["then"] = {"required": ["a"]}
    assert check_parameters_schema(schema).is_valid({"a": "x"})


def test_deep_nesting_is_refused() -> None:
    schema: dict[str, Any] = STRING
    for _ in range(40):
        schema = {"type": "array", "items": schema}
    with pytest.raises(InvalidTool, match="deeper"):
        check_parameters_schema(obj(a=schema))


def _schemas(closed: bool) -> st.SearchStrategy[dict[str, Any]]:
    kinds: list[dict[str, Any]] = [STRING, {"type": "integer"}, {"enum": ["a"]}, {"type": "null"}]
    leaves = st.sampled_from(kinds)

    def extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        objects = st.dictionaries(st.sampled_from("abcde"), children, max_size=3).map(
            lambda props: (
                {"type": "object", "properties": props, "additionalProperties": False}
                if closed
                else {"type": "object", "properties": props}
            )
        )
        arrays = children.map(lambda c: {"type": "array", "items": c})
        unions = st.lists(children, min_size=1, max_size=3).map(lambda cs: {"anyOf": cs})
        return objects | arrays | unions

    return st.recursive(leaves, extend, max_leaves=8)


@given(_schemas(closed=True))
def test_any_schema_closed_everywhere_is_accepted(inner: dict[str, Any]) -> None:
    check_parameters_schema(obj(x=inner))


@given(_schemas(closed=False).filter(lambda s: '"object"' in repr(s).replace("'", '"')))
def test_any_schema_with_an_open_object_is_refused(inner: dict[str, Any]) -> None:
    with pytest.raises(InvalidTool):
        check_parameters_schema(obj(x=inner))
