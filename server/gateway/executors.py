"""How a tool call is carried out once the gateway decided to execute it.

An executor gets an :class:`Invocation` and returns the result (any JSON value) or raises
:class:`ExecutionFailed`, saying whether the effect *may* have happened (``ambiguous``) and
whether trying again could ever help (``permanent``). The gateway turns that into the intent's
``failed``/``retryable`` state. The ``tool_call_id`` travels to the executor as its
idempotency key (the ``Idempotency-Key`` header for ``http``): only a downstream that honours
it can make a repeated delivery harmless.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

import httpx

from agentconsole.server.store.jsonutil import JSONValue


@dataclass(frozen=True, slots=True)
class Invocation:
    """One execution of a tool call."""

    tool: str
    tool_call_id: str
    tenant: str
    program_id: str
    node_id: str
    arguments: dict[str, JSONValue]


class ExecutionFailed(Exception):
    """The tool did not succeed.

    ``ambiguous``: the effect may have been applied (the request may have reached the
    downstream). ``permanent``: the downstream refused the call as such, so repeating it with
    the same arguments cannot succeed.
    """

    def __init__(self, message: str, *, ambiguous: bool, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.ambiguous = ambiguous
        self.permanent = permanent


class Executor(Protocol):
    """Runs invocations of one kind; the gateway applies the timeout around :meth:`run`."""

    async def run(self, invocation: Invocation) -> JSONValue:
        """Carry out ``invocation`` and return its result; raise :class:`ExecutionFailed`."""


class HttpExecutor:
    """POSTs ``{tool, tool_call_id, program_id, node_id, arguments}`` to the tool's URL with
    ``Idempotency-Key: <tool_call_id>``; a 2xx JSON body is the result."""

    def __init__(self, url: str, client: httpx.AsyncClient) -> None:
        self._url = url
        self._client = client

    async def run(self, invocation: Invocation) -> JSONValue:
        """One POST; no retry here (retries are the gateway's decision, by tool class)."""
        payload = {
            "tool": invocation.tool,
            "tool_call_id": invocation.tool_call_id,
            "program_id": invocation.program_id,
            "node_id": invocation.node_id,
            "arguments": invocation.arguments,
        }
        headers = {
            "Idempotency-Key": invocation.tool_call_id,
            "X-Agentconsole-Tenant": invocation.tenant,
        }
        try:
            response = await self._client.post(self._url, json=payload, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
            # Nothing was sent: the effect cannot have happened.
            raise ExecutionFailed(f"cannot reach the tool: {error!r}", ambiguous=False) from error
        except httpx.HTTPError as error:
            raise ExecutionFailed(f"tool request failed: {error!r}", ambiguous=True) from error
        status = response.status_code
        if status >= 300:
            # A 4xx (but timeout/conflict/throttle) is the downstream refusing the call: not
            # applied, and the same call will be refused again.
            refused = 400 <= status < 500 and status not in (408, 409, 425, 429)
            raise ExecutionFailed(
                f"tool answered HTTP {status}: {response.text[:200]}",
                ambiguous=not refused,
                permanent=refused,
            )
        try:
            result: JSONValue = json.loads(response.content)
        except ValueError as error:
            raise ExecutionFailed("tool answered with a non-JSON body", ambiguous=True) from error
        return result
