"""Registration-time rules for the references (``$ref``, ``$dynamicRef``) of a tool's schema.

A reference is checked where it is registered, not where a call first follows it: one that
points to nothing, to something that is not a schema, or into a loop made only of
references and combinators (evaluated on the same value forever) would fail every call
with a 500; one that points to a map of schemas (``#/properties``) would constrain nothing,
an object with any properties included. So every reference must be local, resolve in the
document (a JSON pointer, or an ``$anchor``), land on a schema the rules of
:mod:`schema_rules` accept where a value is admitted, and close no loop on one value. A
``$id`` below the root is refused: it would change what the references under it mean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from agentconsole.server.gateway.errors import InvalidTool

REF_KEYS = ("$ref", "$dynamicRef")
ANCHOR_KEYS = ("$anchor", "$dynamicAnchor")
#: keywords whose subschemas apply to the value their schema applies to (so a reference
#: back through them re-evaluates the same value: a loop)
SAME_VALUE_ONE = ("not", "if", "then", "else")
SAME_VALUE_LIST = ("allOf", "anyOf", "oneOf")
SAME_VALUE_MAP = ("dependentSchemas",)

#: keywords whose values are data, not schemas: a "$ref" key in them is a value's
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})

#: check one schema a reference lands on, given its place (``parameters/...``)
CheckTarget = Callable[[Any, str], None]


def check_references(schema: Mapping[str, Any], root: str, check_target: CheckTarget) -> None:
    """Refuse (:class:`InvalidTool`, naming the reference's place) any reference of
    ``schema`` (whose place is ``root``) that is not local, resolves to nothing or to no
    schema, or whose target ``check_target`` refuses; and any loop of references on one
    value."""
    anchors: dict[str, str] = {}
    refs: list[tuple[str, str]] = []  # (place of the reference, the reference)
    for place, node in _mappings(schema, ""):
        if node.get("$id") is not None and place:
            raise InvalidTool("$id is allowed at the root only", field=f"{root}{place}/$id")
        for key in ANCHOR_KEYS:
            if isinstance(node.get(key), str):
                anchors.setdefault(node[key], place)
        refs.extend((f"{place}/{key}", node[key]) for key in REF_KEYS if key in node)
    checked: set[str] = set()
    targets: dict[str, str] = {}  # place of a schema holding a reference -> its target's
    for place, ref in refs:
        target, found = _resolve(schema, ref, anchors, f"{root}{place}")
        if target not in checked:
            checked.add(target)
            check_target(found, f"{root}{target}")
        targets[place.rsplit("/", 1)[0]] = target
    _refuse_loops(schema, targets, root)


def _mappings(document: Any, place: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every object of ``document`` that may be a schema, with its JSON pointer (``""``: the
    root); values of :data:`DATA_KEYWORDS` are left out. A stack, not recursion."""
    todo: list[tuple[str, Any]] = [(place, document)]
    while todo:
        place, node = todo.pop()
        if isinstance(node, Mapping):
            yield place, node
            todo.extend(
                (f"{place}/{_escape(str(k))}", v) for k, v in node.items() if k not in DATA_KEYWORDS
            )
        elif isinstance(node, list):
            todo.extend((f"{place}/{i}", v) for i, v in enumerate(node))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _resolve(
    schema: Mapping[str, Any], ref: object, anchors: dict[str, str], place: str
) -> tuple[str, Any]:
    """The JSON pointer (``""``: the root) reference ``ref`` lands on, and what is there."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise InvalidTool("only local references (#...) are allowed", field=place)
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        if fragment not in anchors:
            raise InvalidTool(f"reference {ref!r} names no $anchor of the schema", field=place)
        fragment = anchors[fragment]
    found = _at(schema, fragment, missing=True)
    if found is _MISSING:
        raise InvalidTool(f"reference {ref!r} points to nothing in the schema", field=place)
    if not isinstance(found, Mapping | bool):
        raise InvalidTool(
            f"reference {ref!r} points to a {type(found).__name__}, not a schema", field=place
        )
    return fragment, found


_MISSING = object()


def _at(schema: Mapping[str, Any], pointer: str, *, missing: bool = False) -> Any:
    """The value at JSON pointer ``pointer`` (``_MISSING`` when ``missing`` and it is not
    there)."""
    node: Any = schema
    for token in pointer.split("/")[1:] if pointer else ():
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif missing:
            return _MISSING
        else:
            raise KeyError(pointer)
    return node


def _same_value_children(node: Mapping[str, Any], place: str) -> Iterator[str]:
    """The places of ``node``'s subschemas that apply to the value it applies to."""
    for key in SAME_VALUE_ONE:
        if isinstance(node.get(key), Mapping):
            yield f"{place}/{key}"
    for key in SAME_VALUE_LIST:
        if isinstance(node.get(key), list):
            yield from (f"{place}/{key}/{i}" for i in range(len(node[key])))
    for key in SAME_VALUE_MAP:
        if isinstance(node.get(key), Mapping):
            yield from (f"{place}/{key}/{_escape(str(name))}" for name in node[key])


def _refuse_loops(schema: Mapping[str, Any], targets: dict[str, str], root: str) -> None:
    """Refuse a cycle of references and same-value subschemas (an evaluation that never
    moves to a property or an item): a depth-first walk from every schema that refers."""
    done: set[str] = set()
    on_path: set[str] = set()
    stack: list[tuple[str, Iterator[str]]] = []
    for start in targets:
        if start in done:
            continue
        on_path.add(start)
        stack.append((start, _following(schema, targets, start)))
        while stack:
            place, following = stack[-1]
            step = next(following, None)
            if step is None:
                stack.pop()
                on_path.discard(place)
                done.add(place)
            elif step in on_path:
                raise InvalidTool(
                    "this reference loops back to the same value without reaching a"
                    " property or an item (every call would recurse forever)",
                    field=f"{root}{place}/$ref" if place in targets else f"{root}{place}",
                )
            elif step not in done:
                on_path.add(step)
                stack.append((step, _following(schema, targets, step)))


def _following(schema: Mapping[str, Any], targets: dict[str, str], place: str) -> Iterator[str]:
    """Where evaluating the schema at ``place`` goes on with the same value."""
    node = _at(schema, place)
    if isinstance(node, Mapping):
        yield from _same_value_children(node, place)
    if place in targets:
        yield targets[place]
