"""Side-effecting tool calls on a real server, for the consoles' tools views: one left in doubt
(``needs_reconcile``) and one still running until the test lets it end.

As ``tests/server/gateway/test_gateway_pipeline.py`` makes them: the operator registers a
platform tool marked side-effecting and not idempotent (no downstream key), and the tenant
calls it. On the ``sleep`` builtin, asked to sleep past its ``timeout_s``, the call ends in
doubt: the server answers 409 ``needs_reconcile`` and never runs it again by itself. On an
``http`` executor at a loopback downstream that holds every request until the test releases
it (:func:`running`), the call stays ``in_progress`` however long the test's steps take on a
loaded machine, and commits only once released.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from tests.loopback_executor import LoopbackExecutor, serving
from tests.ui.waiting import wait_until

OPERATOR_KEY = "sk-operator"
TENANT_KEY = "sk-tenant-a"
TENANT = "tenant-a"
SLEEP_PARAMETERS = {
    "type": "object",
    "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 60}},
    "required": ["seconds"],
    "additionalProperties": False,
}
MAIL_PARAMETERS = {
    "type": "object",
    "properties": {"to": {"type": "string", "maxLength": 100}},
    "required": ["to"],
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
        arguments = {"seconds": SECONDS_IN_DOUBT}
        return _call(self.url, self.tool, self.program_id, self.node_id, arguments)


#: how long the tool is asked to sleep for a call left in doubt, and its timeout
SECONDS_IN_DOUBT = 5.0
TIMEOUT_S = 0.3
#: the held tool's timeout (the gateway's most): far past any step's deadline, so only the
#: test's release ends the effect, never the clock
HELD_TIMEOUT_S = 600.0


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _get(url: str, path: str, params: dict[str, str]) -> dict[str, list[dict[str, object]]]:
    response = httpx.get(url + path, params=params, headers=_headers(OPERATOR_KEY))
    response.raise_for_status()
    body: dict[str, list[dict[str, object]]] = response.json()
    return body


def _call(
    url: str,
    tool: str,
    program_id: str,
    node_id: str,
    arguments: Mapping[str, object],
    timeout_s: float = 60.0,
) -> httpx.Response:
    body = {"program_id": program_id, "node_id": node_id, "arguments": arguments}
    return httpx.post(
        f"{url}/v1/tools/{tool}/call", json=body, headers=_headers(TENANT_KEY), timeout=timeout_s
    )


def _tool_and_program(
    url: str, *, timeout_s: float, executor: dict[str, str], parameters: dict[str, Any]
) -> tuple[str, str]:
    """A new side-effecting tool (the operator's) on ``executor`` and a new program of
    tenant-a."""
    suffix = uuid.uuid4().hex[:8]
    tool, program_id = f"send_mail_{suffix}", f"ui-tools-{suffix}"
    registration = {
        "name": tool,
        "description": "sends a mail (a stand-in for it)",
        "parameters": parameters,
        "side_effect": True,
        "idempotent": False,
        "timeout_s": timeout_s,
        "executor": executor,
    }
    httpx.post(
        url + "/v1/tools", json=registration, headers=_headers(OPERATOR_KEY)
    ).raise_for_status()
    created = {"program_id": program_id, "labels": {"source": "ui-tools"}}
    httpx.post(url + "/v1/programs", json=created, headers=_headers(TENANT_KEY)).raise_for_status()
    return tool, program_id


def in_doubt(url: str) -> SideEffect:
    """A side-effecting call that timed out: ``needs_reconcile`` once this returns."""
    sleep = {"type": "builtin", "name": "sleep"}
    tool, program_id = _tool_and_program(
        url, timeout_s=TIMEOUT_S, executor=sleep, parameters=SLEEP_PARAMETERS
    )
    answer = _call(url, tool, program_id, "t-mail", {"seconds": SECONDS_IN_DOUBT})
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["type"] == "needs_reconcile", error
    return SideEffect(url, tool, program_id, "t-mail", str(error["tool_call_id"]))


@dataclass(frozen=True, slots=True)
class HeldEffect:
    """A side-effecting call whose downstream holds it running until :meth:`release`."""

    call: SideEffect
    _downstream: LoopbackExecutor
    _gate: threading.Event

    def release(self) -> None:
        """Let the downstream answer: the effect ends and the gateway commits it."""
        self._gate.set()

    @property
    def deliveries(self) -> int:
        """How many times the gateway sent the call to the downstream."""
        return self._downstream.requests


@contextlib.contextmanager
def running(url: str) -> Iterator[HeldEffect]:
    """A side-effecting call, started on a thread, listed ``in_progress`` when the ``with``
    block begins and running until the block calls :meth:`HeldEffect.release` (or ends: it is
    released then, the agent's call answered and the downstream stopped)."""
    gate = threading.Event()
    with serving(LoopbackExecutor(gate.wait)) as downstream:
        http = {"type": "http", "url": downstream.url}
        tool, program_id = _tool_and_program(
            url, timeout_s=HELD_TIMEOUT_S, executor=http, parameters=MAIL_PARAMETERS
        )
        arguments = {"to": "ops@example.com"}
        with ThreadPoolExecutor(max_workers=1) as agent:
            # the agent waits as long as the gateway may hold the call
            answer = agent.submit(
                _call, url, tool, program_id, "t-mail", arguments, HELD_TIMEOUT_S + 30.0
            )
            try:
                call = _listed_in_progress(url, tool, program_id, answer)
                yield HeldEffect(call, downstream, gate)
            finally:
                gate.set()  # the agent's call ends before the pool is shut down


def _listed_in_progress(
    url: str, tool: str, program_id: str, answer: Future[httpx.Response]
) -> SideEffect:
    """The call of ``tool`` on ``program_id`` once the operator route lists it running;
    fails at once if the agent's ``answer`` came first (the call never ran)."""
    params = {"program_id": program_id, "state": "in_progress"}
    listed: list[dict[str, object]] = []

    def started() -> bool:
        if answer.done():
            raise AssertionError(f"the call of {tool} ended unheld: {answer.result().text}")
        listed.extend(_get(url, "/v1/operator/tool-calls", params)["tool_calls"])
        return bool(listed)

    wait_until(started)
    return SideEffect(url, tool, program_id, "t-mail", str(listed[0]["tool_call_id"]))
