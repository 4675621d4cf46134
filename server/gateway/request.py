"""Strict parsing of request bodies: size cap, JSON without duplicate keys or NaN, envelopes.

Everything here is pure and runs before any state is touched. The tool's own arguments are
only parsed as JSON here; their schema is checked later, in pipeline order.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from agentconsole.server.api.jsonguard import TOO_DEEP, json_problem
from agentconsole.server.gateway.errors import BodyTooLarge, InvalidJson, InvalidRequest
from agentconsole.server.gateway.ports import ToolOutcome
from agentconsole.server.gateway.registration import NAME_RULE, is_tool_name
from agentconsole.server.store.jsonutil import JSONValue

#: a program or node id, as the core's (``api/schemas.py``); checked with ``fullmatch``: Python's
#: ``$`` also matches before a final newline
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_ATTEMPT = 1_000_000
_OUTCOMES: dict[str, ToolOutcome] = {"ok": "ok", "fail": "fail", "timeout": "timeout"}


def _no_duplicates(pairs: list[tuple[str, JSONValue]]) -> dict[str, JSONValue]:
    out: dict[str, JSONValue] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidRequest(f"duplicate key {key!r} in JSON object", field=key)
        out[key] = value
    return out


def _no_constant(name: str) -> JSONValue:
    raise InvalidJson(f"{name} is not valid JSON")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJson("number out of range")
    return value


def parse_body(raw: bytes, limit: int) -> dict[str, JSONValue]:
    """Decode ``raw`` as one JSON object of at most ``limit`` bytes.

    Raises :class:`BodyTooLarge` (413) over the limit; :class:`InvalidJson` (400) for what is
    not acceptable JSON, as on the core routes (``api/jsonguard.py``: syntax, ``NaN``, a
    number out of range, nesting too deep); :class:`InvalidRequest` (422) for JSON that is not
    one object or has duplicate keys (two parsers could disagree on which one counts).
    """
    if len(raw) > limit:
        raise BodyTooLarge(f"request body over {limit} bytes")
    try:
        value = json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_float=_float,
        )
    except (InvalidRequest, InvalidJson):
        raise
    except RecursionError:
        raise InvalidJson(TOO_DEEP) from None
    except ValueError as error:  # UnicodeDecodeError is a ValueError
        raise InvalidJson(f"body is not valid JSON: {str(error)[:200]}") from error
    problem = json_problem(value)
    if problem is not None:
        raise InvalidJson(problem)
    if not isinstance(value, dict):
        raise InvalidRequest("body must be a JSON object")
    return cast(dict[str, JSONValue], value)


def integral(value: JSONValue) -> JSONValue:
    """A number with no fraction is an integer (JSON Schema's rule): ``5.0`` -> 5."""
    return int(value) if type(value) is float and value.is_integer() else value


def _check_fields(body: Mapping[str, JSONValue], allowed: frozenset[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0]!r}", field=unknown[0])


def identifier(body: Mapping[str, JSONValue], key: str) -> str:
    """A required program/node id matching :data:`ID_PATTERN`."""
    value = body.get(key)
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvalidRequest(f"{key} must match {ID_PATTERN.pattern}", field=key)
    return value


def check_program_id(program_id: str) -> str:
    """A program id from the path, checked like a body id."""
    return identifier({"program_id": program_id}, "program_id")


@dataclass(frozen=True, slots=True)
class CallRequest:
    """``POST /v1/tools/{name}/call``: the node asking, its logical attempt, the arguments."""

    program_id: str
    node_id: str
    arguments: dict[str, JSONValue]
    attempt: int


def parse_call(body: Mapping[str, JSONValue]) -> CallRequest:
    """``{program_id, node_id, arguments: {...}, attempt?: int >= 1}`` (attempt defaults to 1:
    a transport retry keeps it, a deliberate re-plan of the node increments it)."""
    _check_fields(body, frozenset({"program_id", "node_id", "arguments", "attempt"}))
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict):
        raise InvalidRequest("arguments must be a JSON object", field="arguments")
    attempt = integral(body.get("attempt", 1))
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 1 <= attempt <= MAX_ATTEMPT:
        raise InvalidRequest(f"attempt must be an integer in [1, {MAX_ATTEMPT}]", field="attempt")
    return CallRequest(
        identifier(body, "program_id"), identifier(body, "node_id"), arguments, attempt
    )


def parse_started(body: Mapping[str, JSONValue]) -> tuple[str, str]:
    """``{node_id, tool}`` of an agent-run tool that starts.

    ``tool`` need not be registered (any name the tenant does not see is the agent's own
    tool), but it is named as a registered tool would be: the node keeps it, and both consoles
    and the events show it, so its length and characters are bounded here."""
    _check_fields(body, frozenset({"node_id", "tool"}))
    tool = body.get("tool")
    if not is_tool_name(tool):
        raise InvalidRequest(f"tool must be a tool name: {NAME_RULE}", field="tool")
    return identifier(body, "node_id"), tool


def parse_finished(body: Mapping[str, JSONValue]) -> tuple[str, ToolOutcome, float | None]:
    """``{node_id, outcome: ok|fail|timeout, latency_s?: number >= 0}``."""
    _check_fields(body, frozenset({"node_id", "outcome", "latency_s"}))
    outcome = _OUTCOMES.get(str(body.get("outcome")))
    if outcome is None or not isinstance(body.get("outcome"), str):
        raise InvalidRequest("outcome must be ok, fail or timeout", field="outcome")
    latency = body.get("latency_s")
    if latency is not None and (
        isinstance(latency, bool)
        or not isinstance(latency, int | float)
        or not math.isfinite(latency)
        or not 0 <= latency <= 86_400
    ):
        raise InvalidRequest("latency_s must be seconds in [0, 86400]", field="latency_s")
    return identifier(body, "node_id"), outcome, None if latency is None else float(latency)
