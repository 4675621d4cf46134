"""The one culprit a refused body (422; 400 on OpenAI's routes) names, as the client wrote it.

``field`` is the path of field names and list indexes to it (``messages.0.content``), never
pydantic's tags for the members of a field that takes several shapes (``stop.str``,
``prompt.constrained-str``); where every member refused, the message is the one of the member
that takes the input's JSON type (a list of five ``stop`` strings: the list's "at most 4
items"), else one naming the types the field takes. OpenAI's clients read ``field`` as
``e.param``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from litestar import Request
from litestar.exceptions import ValidationException
from pydantic import TypeAdapter
from pydantic_core import CoreSchema, SchemaValidator, core_schema

#: where Litestar says a refused value came from when it is a parameter, not the body
_PARAMETER_SOURCES = ("query", "header", "cookie", "path")
_Loc = tuple[str | int, ...]
#: core schema types that wrap one inner schema (``schema``) and add nothing to a loc
_WRAPPERS = frozenset(
    {"default", "nullable", "function-before", "function-after", "function-wrap", "model"}
)
_UNIONS = ("union", "tagged-union")
#: the JSON type each core schema type takes (a type missing here: any, it cannot be told)
_JSON_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "none": "null",
    "list": "array",
    "set": "array",
    "frozenset": "array",
    "tuple": "array",
    "dict": "object",
    "model-fields": "object",
    "typed-dict": "object",
}
_EVERY_JSON_TYPE = frozenset(_JSON_TYPES.values())
_JSON_TYPE_OF = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}
_A_JSON_TYPE = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}
_JSON_TYPES_PLURAL = {
    "string": "strings",
    "integer": "integers",
    "number": "numbers",
    "boolean": "booleans",
    "array": "arrays",
    "object": "objects",
}
#: an error with no ``input`` (a model that hides its input in errors)
_NO_INPUT = object()


def body_errors(
    exc: ValidationException, details: Sequence[object]
) -> list[Mapping[str, Any]] | None:
    """pydantic's own errors for a refused body (``loc`` a tuple of field names, indexes and
    union-member tags; ``input`` the value there), which Litestar chains as the cause of its
    exception; None for a refused parameter (query, header, path) or when they are absent."""
    if any(isinstance(d, dict) and d.get("source") in _PARAMETER_SOURCES for d in details):
        return None
    errors = getattr(exc.__cause__, "errors", None)
    if not isinstance(errors, list) or not errors:
        return None
    if not all(isinstance(e, dict) and isinstance(e.get("loc"), tuple) for e in errors):
        return None
    return errors


class _BodySchema:
    """A body model's core schema, read along an error's ``loc``.

    pydantic puts a tag in the loc where a field takes several shapes (``stop.str``,
    ``prompt.constrained-str``, ``tool_choice.NamedToolChoice``): the union's member that
    refused. The tags are told by where they stand, not by how they look (a member's tag can be
    a model's class name, which reads as a field name): a loc part is a tag exactly where the
    schema at that point is a union, which walking the schema along the loc shows."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.root = schema
        # a model used twice (or recursively) is a definition its uses refer to
        definitions = schema.get("definitions", []) if schema["type"] == "definitions" else []
        self.definitions: dict[str, Mapping[str, Any]] = {d["ref"]: d for d in definitions}
        self._members: dict[int, dict[str, Mapping[str, Any]]] = {}  # id(union) -> members

    def tags(self, loc: _Loc) -> dict[int, Mapping[str, Any] | None]:
        """The positions of ``loc`` that are union-member tags, each with its member's schema
        (None when it cannot be told)."""
        tags: dict[int, Mapping[str, Any] | None] = {}
        schema: Mapping[str, Any] | None = self.root
        for position, part in enumerate(loc):
            schema = self._unwrap(schema)
            if schema is None:
                break  # past what the schema describes (an unknown key): field names
            if schema["type"] in _UNIONS:
                schema = tags[position] = self._members_of(schema).get(str(part))
            else:
                schema = _child(schema, part)
        return tags

    def takes(self, member: Mapping[str, Any] | None, json_type: str | None) -> bool:
        """Whether ``member`` takes a JSON value of ``json_type`` (yes when it cannot be
        told)."""
        if member is None or json_type is None:
            return True
        types = self._json_types(member)
        return json_type in types or (json_type == "integer" and "number" in types)

    def describe(self, members: Sequence[Mapping[str, Any] | None]) -> str:
        """What ``members`` take, in words: "a string or an array of strings"."""
        words: list[str] = []
        for member in members:
            schema = self._unwrap(member)
            if schema is None:
                continue
            if schema["type"] == "literal":
                words += [repr(value) for value in schema["expected"]]
            elif _JSON_TYPES.get(schema["type"]) == "array" and "items_schema" in schema:
                items = self._json_types(schema["items_schema"])
                plural = _JSON_TYPES_PLURAL.get(next(iter(items))) if len(items) == 1 else None
                words.append(f"an array of {plural}" if plural else "an array")
            else:
                words += [_A_JSON_TYPE[t] for t in sorted(self._json_types(schema))]
        words = list(dict.fromkeys(words))
        if not words:
            return "of another type"
        return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"

    def _json_types(self, schema: Mapping[str, Any]) -> frozenset[str]:
        unwrapped = self._unwrap(schema)
        if unwrapped is None:
            return _EVERY_JSON_TYPE
        kind = unwrapped["type"]
        if kind == "literal":
            return frozenset(_JSON_TYPE_OF.get(type(v), "string") for v in unwrapped["expected"])
        if kind in _UNIONS:
            members = self._members_of(unwrapped).values()
            return frozenset().union(*(self._json_types(m) for m in members))
        json_type = _JSON_TYPES.get(kind)
        return frozenset({json_type}) if json_type else _EVERY_JSON_TYPE

    def _unwrap(self, schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The schema under the wrappers that add no loc part (None: cannot be told)."""
        while schema is not None:
            kind = schema["type"]
            if kind == "definition-ref":
                schema = self.definitions.get(schema["schema_ref"])
            elif kind in _WRAPPERS or kind == "definitions":
                schema = schema.get("schema")  # a plain function validator has none
            else:
                return schema
        return None

    def _members_of(self, union: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        """A union's members by the tag pydantic gives them in a loc: a tagged union's
        discriminator value; else a member's label, or its validator's name (pydantic-core's
        tag for a member: ``list[str]``, ``constrained-str``, a model's class name)."""
        members = self._members.get(id(union))
        if members is None:
            if union["type"] == "tagged-union":
                members = {str(tag): member for tag, member in union["choices"].items()}
            else:
                members = {}
                for choice in union["choices"]:
                    member, label = choice if isinstance(choice, tuple) else (choice, None)
                    members[label or self._validator_name(member)] = member
            self._members[id(union)] = members
        return members

    def _validator_name(self, member: Mapping[str, Any]) -> str:
        schema: CoreSchema = member  # pydantic-core's schemas are mappings
        if self.definitions:  # the member's references resolve as in the body's validator
            defined = list(self.definitions.values())
            schema = core_schema.definitions_schema(schema, defined)
        try:
            return SchemaValidator(schema).title
        except Exception:  # a member pydantic-core will not build alone: its tag is unknown
            return ""


def _child(schema: Mapping[str, Any], part: str | int) -> Mapping[str, Any] | None:
    """The schema of ``part`` (a field name, an index, a key) inside ``schema``; None when it
    describes none (an unknown key, a leaf)."""
    kind = schema["type"]
    if kind in ("model-fields", "typed-dict"):
        fields: Mapping[str, Mapping[str, Any]] = schema["fields"]
        field = fields.get(str(part)) or next(
            (f for f in fields.values() if f.get("validation_alias") == part), None
        )
        return field["schema"] if field else schema.get("extras_schema")
    if kind in ("list", "set", "frozenset"):
        return schema.get("items_schema")
    if kind == "dict":  # a refused key is told by pydantic's ``[key]`` after it
        return schema.get("keys_schema") if part == "[key]" else schema.get("values_schema")
    return None


def body_schema(request: Request[Any, Any, Any]) -> _BodySchema | None:
    """The schema of the route's body (its handler's ``data``), None when it has none."""
    try:
        data = request.route_handler.parsed_fn_signature.parameters.get("data")
    except Exception:  # no route handler (refused before routing)
        return None
    if data is None:
        return None
    try:
        return schema_of(data.annotation)
    except TypeError:  # an annotation that cannot be a cache key: its locs are left as they are
        return None


@functools.cache
def schema_of(annotation: Any) -> _BodySchema | None:
    try:
        schema = TypeAdapter(annotation).core_schema
    except Exception:  # not a type pydantic validates: its locs are left as they are
        return None
    return _BodySchema(schema)


def culprit(errors: Sequence[Mapping[str, Any]], body: _BodySchema | None) -> tuple[str, str]:
    """The field and message of the one error a 422 reports: the first, its loc without the
    union-member tags. Where a union refused, every member's errors are there, the first
    member's first: the member that takes the input's JSON type is the one that speaks (the
    first such), and where none does, the message names what the union takes."""
    group = list(errors)
    settled = 0  # loc positions below this are field names or chosen unions
    while True:
        loc: _Loc = group[0]["loc"]
        tags = body.tags(loc) if body is not None else {}
        union = min((position for position in tags if position >= settled), default=None)
        if union is None or body is None:
            return _field(loc, tags), str(group[0]["msg"])
        prefix = loc[:union]
        by_member: dict[str | int, list[Mapping[str, Any]]] = {}
        for error in group:
            if error["loc"][:union] == prefix and len(error["loc"]) > union:
                by_member.setdefault(error["loc"][union], []).append(error)
        members = {
            tag: body.tags(refused[0]["loc"]).get(union) for tag, refused in by_member.items()
        }
        # a member that refused the value itself carries it: the union's input
        given = next(
            (
                error.get("input", _NO_INPUT)
                for refused in by_member.values()
                for error in refused
                if len(error["loc"]) == union + 1
            ),
            _NO_INPUT,
        )
        if given is _NO_INPUT:  # every member took the value's type, refused inside it
            chosen = next(iter(by_member))
        else:
            json_type = _JSON_TYPE_OF.get(type(given))
            taking = [tag for tag, member in members.items() if body.takes(member, json_type)]
            if not taking:
                described = body.describe(list(members.values()))
                return _field(prefix, tags), f"Input should be {described}"
            chosen = taking[0]
        group, settled = by_member[chosen], union + 1


def _field(loc: _Loc, tags: Mapping[int, object]) -> str:
    """``loc`` as the client names it: field names and indexes, without union-member tags."""
    return ".".join(str(part) for position, part in enumerate(loc) if position not in tags)
