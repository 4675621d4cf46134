"""What the store keeps of a tenant's tool arguments and results: ``full``, ``hash`` or ``none``.

A tool's arguments and its result can hold a tenant's secrets (a customer record, a file's
contents). Per tenant (``privacy.tool_data``, ``privacy.tenants``), the gateway stores them:

* ``full`` (the default): as they are. A retry of a committed call (same ``tool_call_id``)
  replays the stored result exactly; operators can read what a tool was asked and answered.
* ``hash``: a SHA-256 digest of the canonical JSON and its size in bytes. A replay answers
  ``result: null`` with ``redacted: "hash"`` and the digest, so a client can check its copy.
* ``none``: nothing but the fact (and, for results, the latency). A replay answers
  ``result: null`` with ``redacted: "none"``.

The caller of the first execution always gets the real result; only what is stored (and so
what replays, exports and the consoles can show) changes. The same holds for an ``http``
tool's error body (which may quote the call's data): the caller's 424 carries it, the intent's
``error`` keeps it only under ``full`` (otherwise just the HTTP status). Idempotency is
unaffected: a side-effecting call still runs once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal, get_args

from agentconsole.server.store.jsonutil import JSONValue

Redaction = Literal["full", "hash", "none"]
MODES: tuple[str, ...] = get_args(Redaction)


def canonical(value: JSONValue) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces, no NaN)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(value: JSONValue) -> dict[str, JSONValue]:
    """``{"sha256", "bytes"}`` of ``value``'s canonical JSON."""
    text = canonical(value).encode()
    return {"sha256": hashlib.sha256(text).hexdigest(), "bytes": len(text)}


def stored_arguments(arguments: JSONValue, mode: Redaction) -> str | None:
    """The ``tool_intents.arguments`` value for ``arguments`` under ``mode`` (None: nothing)."""
    if mode == "full":
        return canonical(arguments)
    if mode == "hash":
        return canonical({"redacted": "hash", **digest(arguments)})
    return None


def stored_result(result: JSONValue, latency_s: float, mode: Redaction) -> str:
    """The stored envelope of a committed result under ``mode`` (``ValueError`` for NaN or
    infinities, whatever the mode: the caller's answer must be JSON too)."""
    text = json.dumps(
        {"result": result, "latency_s": latency_s}, separators=(",", ":"), allow_nan=False
    )
    if mode == "full":
        return text
    envelope: dict[str, JSONValue] = {"redacted": mode, "latency_s": latency_s}
    if mode == "hash":
        envelope.update(digest(result))
    return json.dumps(envelope, separators=(",", ":"))
