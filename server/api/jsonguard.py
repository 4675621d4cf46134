"""What every JSON body must be, on every route (core and tool gateway), else 400
``invalid_json`` before any handler sees it:

* nested at most :data:`MAX_JSON_DEPTH` levels: the decoders and everything after them
  (validation, templates, the tool's JSON Schema check, ``json.dumps`` of a tool declaration)
  recurse, and Python's recursion limit is not a limit for input;
* numbers in range: integers within 64 bits, other numbers finite (``1e400`` is refused by the
  decoders themselves), so no reader of a number meets an overflow.

The size limit is ``server.max_body_bytes`` (core, 413) and the gateway's ``max_body_bytes``.
The check walks the decoded value (a chat body of 200 messages costs about a fifth of its
decoding); a decoder that hits Python's own recursion limit first raises ``RecursionError``,
which is answered the same way.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from agentconsole.server.api.errors import ApiError

#: the deepest JSON body accepted (a tool's JSON Schema nests a few levels per property)
MAX_JSON_DEPTH = 64
TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
OUT_OF_RANGE = "integer out of range (64 bits)"
_LOW, _HIGH = -(2**63), 2**63


def json_problem(value: object, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why a decoded JSON value is refused (:data:`TOO_DEEP`, :data:`OUT_OF_RANGE`), or
    None."""
    if type(value) is not dict and type(value) is not list:
        return OUT_OF_RANGE if type(value) is int and not _LOW <= value < _HIGH else None
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        container, depth = pop()
        for child in container.values() if type(container) is dict else container:
            kind = type(child)
            if kind is dict or kind is list:
                if depth >= limit:
                    return TOO_DEEP
                push((child, depth + 1))
            elif kind is int and not _LOW <= child < _HIGH:
                return OUT_OF_RANGE
    return None


def invalid_json(message: str) -> ApiError:
    """The 400 every route answers for a body that is not acceptable JSON."""
    return ApiError(400, message, type="invalid_json")


class GuardedRequest(Request[Any, Any, Any]):
    """The app's request class: its JSON body is depth-checked once decoded."""

    async def json(self) -> Any:
        try:
            value = await super().json()
        except RecursionError:
            raise invalid_json(TOO_DEEP) from None
        problem = json_problem(value)
        if problem is not None:
            raise invalid_json(problem)
        return value
