"""Side-effecting tool calls on a real server, for the consoles' tools views: one left in doubt
(``needs_reconcile``) and one still running.

As ``tests/server/gateway/test_gateway_pipeline.py`` makes them: the operator registers a
platform tool on the ``sleep`` builtin marked side-effecting and not idempotent (no downstream
key), and the tenant calls it. Asked to sleep past its ``timeout_s``, the call ends in doubt:
the server answers 409 ``needs_reconcile`` and never runs it again by itself. Asked to sleep
within it, the call runs that long, listed ``in_progress``.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

import httpx

OPERATOR_KEY = "sk-operator"
TENANT_KEY = "sk-tenant-a"
TENANT = "tenant-a"
SLEEP_PARAMETERS = {
    "type": "object",
    "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 60}},
    "required": ["seconds"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class SideEffect:
    """One call of a side-effecting tool: where it ran and its key."""

    url: str
    tool: str
    program_id: str
    node_id: str
    tool_call_id: str

    def state(self) -> str:
        """The call's intent state, as the operator route lists it."""
        params = {"program_id": self.program_id}
        listing = _get(self.url, "/v1/operator/tool-calls", params)["tool_calls"]
        return next(str(c["state"]) for c in listing if c["tool_call_id"] == self.tool_call_id)

    def retry(self) -> httpx.Response:
        """The agent's retry of the call, with the same key (node and attempt)."""
        return _call(self.url, self.tool, self.program_id, self.node_id, SECONDS_IN_DOUBT)


#: how long the tool is asked to sleep for a call left in doubt, and its timeout
SECONDS_IN_DOUBT = 5.0
TIMEOUT_S = 0.3


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _get(url: str, path: str, params: dict[str, str]) -> dict[str, list[dict[str, object]]]:
    response = httpx.get(url + path, params=params, headers=_headers(OPERATOR_KEY))
    response.raise_for_status()
    body: dict[str, list[dict[str, object]]] = response.json()
    return body


def _call(url: str, tool: str, program_id: str, node_id: str, seconds: float) -> httpx.Response:
    body = {"program_id": program_id, "node_id": node_id, "arguments": {"seconds": seconds}}
    return httpx.post(
        f"{url}/v1/tools/{tool}/call", json=body, headers=_headers(TENANT_KEY), timeout=60
    )


def _tool_and_program(url: str, *, timeout_s: float) -> tuple[str, str]:
    """A new side-effecting sleep tool (the operator's) and a new program of tenant-a."""
    suffix = uuid.uuid4().hex[:8]
    tool, program_id = f"send_mail_{suffix}", f"ui-tools-{suffix}"
    registration = {
        "name": tool,
        "description": "sends a mail (a sleep standing in for it)",
        "parameters": SLEEP_PARAMETERS,
        "side_effect": True,
        "idempotent": False,
        "timeout_s": timeout_s,
        "executor": {"type": "builtin", "name": "sleep"},
    }
    httpx.post(
        url + "/v1/tools", json=registration, headers=_headers(OPERATOR_KEY)
    ).raise_for_status()
    created = {"program_id": program_id, "labels": {"source": "ui-tools"}}
    httpx.post(url + "/v1/programs", json=created, headers=_headers(TENANT_KEY)).raise_for_status()
    return tool, program_id


def in_doubt(url: str) -> SideEffect:
    """A side-effecting call that timed out: ``needs_reconcile`` once this returns."""
    tool, program_id = _tool_and_program(url, timeout_s=TIMEOUT_S)
    answer = _call(url, tool, program_id, "t-mail", SECONDS_IN_DOUBT)
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["type"] == "needs_reconcile", error
    return SideEffect(url, tool, program_id, "t-mail", str(error["tool_call_id"]))


def running(url: str, seconds: float) -> tuple[SideEffect, threading.Thread]:
    """A side-effecting call that runs ``seconds`` (within its timeout), started on a thread;
    returns once the server lists it ``in_progress``."""
    tool, program_id = _tool_and_program(url, timeout_s=30.0)
    thread = threading.Thread(
        target=_call, args=(url, tool, program_id, "t-mail", seconds), daemon=True
    )
    thread.start()
    for _ in range(200):
        params = {"program_id": program_id, "state": "in_progress"}
        listing = _get(url, "/v1/operator/tool-calls", params)["tool_calls"]
        if listing:
            key = str(listing[0]["tool_call_id"])
            return SideEffect(url, tool, program_id, "t-mail", key), thread
        threading.Event().wait(0.05)
    raise AssertionError("the side effect never started")
