"""What a tool call answers, and the JSON the store keeps for it.

A committed result is stored as ``{"result": ..., "latency_s": ...}`` so that a replay answers
exactly what the first call answered (or, for a tenant whose tool data is redacted, as
``{"redacted", "latency_s", ...}``: see :mod:`redaction`); a failure as ``{"type", "message",
"outcome"}`` in the intent's ``error`` column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from agentconsole.server.gateway.errors import EgressRefused, ToolFailed, ToolTimeout
from agentconsole.server.gateway.ports import ToolOutcome
from agentconsole.server.store.jsonutil import JSONValue

CallStatus = Literal["committed", "replayed"]
#: The failures answered with their own error type (any other is ``tool_failed``).
_FAILURE_TYPES: dict[str, type[ToolFailed]] = {
    cls.type: cls for cls in (ToolTimeout, EgressRefused)
}


@dataclass(frozen=True, slots=True)
class CallResult:
    """The answer to a successful tool call (first execution or replay)."""

    tool_call_id: str
    status: CallStatus
    result: JSONValue
    latency_s: float
    #: a replay of a result stored redacted: ``hash`` (with ``sha256``) or ``none``
    redacted: str | None = None
    sha256: str | None = None

    def to_json(self) -> dict[str, JSONValue]:
        """The API body ``{tool_call_id, status, result, latency_s}`` (plus ``redacted`` and
        ``sha256`` for a redacted replay)."""
        body: dict[str, JSONValue] = {
            "tool_call_id": self.tool_call_id,
            "status": self.status,
            "result": self.result,
            "latency_s": self.latency_s,
        }
        if self.redacted is not None:
            body["redacted"] = self.redacted
            if self.sha256 is not None:
                body["sha256"] = self.sha256
        return body


def encode_result(result: JSONValue, latency_s: float) -> str:
    """The stored form of a committed result; ``ValueError`` for NaN or infinities."""
    return json.dumps(
        {"result": result, "latency_s": latency_s}, separators=(",", ":"), allow_nan=False
    )


def decode_result(tool_call_id: str, text: str | None) -> CallResult:
    """A replay of a stored result; a result an operator stored by hand (not an envelope)
    is answered as is, with latency 0."""
    value = json.loads(text) if text else None
    if isinstance(value, dict) and value.get("redacted") in ("hash", "none"):
        latency = value.get("latency_s")
        sha = value.get("sha256")
        return CallResult(
            tool_call_id,
            "replayed",
            None,
            float(latency) if isinstance(latency, int | float) else 0.0,
            redacted=str(value["redacted"]),
            sha256=sha if isinstance(sha, str) else None,
        )
    if isinstance(value, dict) and set(value) == {"result", "latency_s"}:
        latency = value["latency_s"]
        return CallResult(
            tool_call_id,
            "replayed",
            value["result"],
            float(latency) if isinstance(latency, int | float) else 0.0,
        )
    return CallResult(tool_call_id, "replayed", value, 0.0)


def encode_failure(kind: str, message: str, outcome: ToolOutcome) -> str:
    """The stored form of a failure (the intent's ``error`` column)."""
    return json.dumps({"type": kind, "message": message, "outcome": outcome})


def failure_error(
    tool_call_id: str, text: str | None, *, retryable: bool, replayed: bool
) -> ToolFailed:
    """The 424 error for a failure stored as :func:`encode_failure` (or as plain text)."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        value = {"message": text}
    if not isinstance(value, dict):
        value = {"message": str(value)}
    message = str(value.get("message") or "the tool failed")
    cls = _FAILURE_TYPES.get(str(value.get("type")), ToolFailed)
    return cls(
        message,
        extra={"tool_call_id": tool_call_id, "retryable": retryable, "replayed": replayed},
    )
