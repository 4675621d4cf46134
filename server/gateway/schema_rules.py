"""Registration-time rules for a tool's parameter schema, and its compiled validator.

A tool's ``parameters`` must be a valid JSON Schema 2020-12 for an object, and every schema in
it that can accept an object must say ``"additionalProperties": false``: unknown properties
are the first thing an injected or confused model sends, and a schema that lets them through
turns the tool into an arbitrary RPC (seed section 13, research section 3.4). A subschema
that constrains nothing (``{}``, ``true``, no ``type``/``enum``/``const``/``$ref``/combinator)
accepts objects with any properties, so it is refused as well. Its regular expressions must
compile as RE2 (:mod:`patterns`: matched in linear time, so no schema can stall the server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

from agentconsole.server.gateway.errors import InvalidTool
from agentconsole.server.gateway.patterns import (
    ToolArgumentsValidator,
    UnsupportedPattern,
    compiled,
)
from agentconsole.server.gateway.schema_refs import check_references

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 32

# Where a keyword's subschemas apply: to the value of a property or item (VALUE: must be
# constrained), to the same instance as their parent (BRANCH: may leave ``type`` to it), or
# nowhere a value is admitted by them (SKIP: ``not`` and ``if`` only exclude or select, and
# ``propertyNames`` sees strings), so a closed object there would change nothing or mislead.
VALUE, BRANCH, SKIP = "value", "branch", "skip"
_ONE = {
    "additionalProperties": VALUE,
    "unevaluatedProperties": VALUE,
    "items": VALUE,
    "contains": VALUE,
    "unevaluatedItems": VALUE,
    "contentSchema": VALUE,
    "not": SKIP,
    "if": SKIP,
    "then": BRANCH,
    "else": BRANCH,
    "propertyNames": SKIP,
}
_LIST = {"prefixItems": VALUE, "allOf": BRANCH, "anyOf": BRANCH, "oneOf": BRANCH}
_MAP = {
    "properties": VALUE,
    "patternProperties": VALUE,
    "$defs": VALUE,
    "definitions": VALUE,
    "dependentSchemas": BRANCH,
}
# A subschema with one of these is constrained by something besides ``additionalProperties``.
_CONSTRAINED = ("type", "enum", "const", "$ref", "$dynamicRef", "allOf", "anyOf", "oneOf")
_OBJECT_HINTS = (
    "properties",
    "patternProperties",
    "required",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
)


def _children(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, Any, str]]:
    for key, role in _ONE.items():
        if key in node:
            yield f"{path}/{key}", node[key], role
    for key, role in _LIST.items():
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                yield f"{path}/{key}/{i}", sub, role
    for key, role in _MAP.items():
        if isinstance(node.get(key), Mapping):
            for name, sub in node[key].items():
                yield f"{path}/{key}/{name}", sub, role


def _may_be_object(node: Mapping[str, Any]) -> bool:
    declared = node.get("type")
    if declared is None:
        return any(hint in node for hint in _OBJECT_HINTS)
    return declared == "object" or (isinstance(declared, list) and "object" in declared)


def _check_node(node: Any, path: str, depth: int, role: str, parent_closed: bool = False) -> None:
    """Check ``node``; a BRANCH of a closed object schema cannot admit more than its parent,
    so it need not close itself (``then: {required: [...]}``)."""
    if depth > MAX_SCHEMA_DEPTH:
        raise InvalidTool(f"schema nests deeper than {MAX_SCHEMA_DEPTH} levels", field=path)
    if node is False or role == SKIP or (node is True and role != VALUE):
        return
    if not isinstance(node, Mapping):
        raise InvalidTool(
            "a `true` subschema accepts any value, objects with any properties included;"
            " declare a type",
            field=path,
        )
    if role == VALUE and not any(key in node for key in _CONSTRAINED):
        raise InvalidTool(
            "this subschema accepts any value (no type, enum, const or $ref); declare a type",
            field=path,
        )
    closed = node.get("additionalProperties") is False
    if _may_be_object(node) and not closed and not (role == BRANCH and parent_closed):
        raise InvalidTool('every object schema must set "additionalProperties": false', field=path)
    for child_path, child, child_role in _children(node, path):
        inherits = closed or (role == BRANCH and parent_closed)
        _check_node(child, child_path, depth + 1, child_role, child_role == BRANCH and inherits)


def _check_patterns(schema: Mapping[str, Any]) -> None:
    """Every ``pattern`` and ``patternProperties`` key anywhere in ``schema`` compiles as RE2:
    anywhere, not only under the keywords that admit values, since a ``$ref`` may point into
    any part of the document, ``propertyNames``, ``not`` and ``if`` match their patterns all
    the same, and a pattern's mistake must not wait for a call. ``unevaluatedProperties`` is
    refused where ``patternProperties`` appears (:mod:`patterns`: its search is Python's).
    Raises :class:`InvalidTool` naming the first culprit's JSON pointer."""
    uses_pattern_properties = False
    unevaluated_at: str | None = None
    todo: list[tuple[str, Any]] = [("parameters", schema)]
    while todo:
        path, node = todo.pop()
        if isinstance(node, list):
            todo.extend((f"{path}/{i}", item) for i, item in enumerate(node))
            continue
        if not isinstance(node, Mapping):
            continue
        found = [(f"{path}/pattern", node.get("pattern"))]
        if isinstance(node.get("patternProperties"), Mapping):
            uses_pattern_properties = True
            found += [(f"{path}/patternProperties", key) for key in node["patternProperties"]]
        if "unevaluatedProperties" in node and unevaluated_at is None:
            unevaluated_at = f"{path}/unevaluatedProperties"
        for where, pattern in found:
            if isinstance(pattern, str):
                _compiles(pattern, where)
        todo.extend((f"{path}/{key}", value) for key, value in node.items())
    if uses_pattern_properties and unevaluated_at is not None:
        raise InvalidTool(
            "unevaluatedProperties cannot be combined with patternProperties (patterns are"
            " matched in linear time, and this combination would match them otherwise);"
            ' close the objects with "additionalProperties": false',
            field=unevaluated_at,
        )


def _compiles(pattern: str, where: str) -> None:
    try:
        compiled(pattern)
    except UnsupportedPattern as error:
        raise InvalidTool(
            f"pattern {error} is not supported: patterns are matched in linear time"
            " (RE2), without backreferences or lookaround",
            field=where,
        ) from None


def check_parameters_schema(schema: object) -> Validator:
    """Validate a registration's ``parameters`` and return its compiled validator (one that
    matches the schema's patterns by RE2).

    Requires a 2020-12 schema (``$schema`` absent or the 2020-12 URI) whose root is ``type:
    object``, at most :data:`MAX_SCHEMA_BYTES` of JSON and :data:`MAX_SCHEMA_DEPTH` levels.
    Raises :class:`InvalidTool` naming the offending JSON pointer in ``field``. ``$ref`` may
    only point inside the schema (``#...``): a remote reference would be fetched; and it must
    land on a schema these rules accept (:mod:`schema_refs`).
    """
    if not isinstance(schema, Mapping):
        raise InvalidTool("parameters must be a JSON Schema object", field="parameters")
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise InvalidTool(f"parameters exceeds {MAX_SCHEMA_BYTES} bytes", field="parameters")
    dialect = schema.get("$schema")
    if dialect is not None and dialect != Draft202012Validator.META_SCHEMA["$id"]:
        raise InvalidTool("only JSON Schema 2020-12 is supported", field="parameters/$schema")
    if schema.get("type") != "object":
        raise InvalidTool('the root schema must be {"type": "object", ...}', field="parameters")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        pointer = "/".join(str(p) for p in error.absolute_path)
        raise InvalidTool(
            f"not a valid JSON Schema 2020-12: {error.message}",
            field=f"parameters/{pointer}".rstrip("/"),
        ) from error
    _check_node(schema, "parameters", 0, VALUE)
    check_references(schema, "parameters", _check_target)
    _check_patterns(schema)
    validator: Validator = ToolArgumentsValidator(schema)
    return validator


def _check_target(node: Any, place: str) -> None:
    """A schema a reference lands on is checked as where a value is admitted."""
    _check_node(node, place, 0, VALUE)
