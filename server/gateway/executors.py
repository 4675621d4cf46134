"""How a tool call is carried out once the gateway decided to execute it.

An executor gets an :class:`Invocation` and returns the result (any JSON value) or raises
:class:`ExecutionFailed`, saying whether the effect *may* have happened (``ambiguous``) and
whether trying again could ever help (``permanent``). The gateway turns that into the intent's
``failed``/``retryable`` state. The ``tool_call_id`` travels to the executor as its
idempotency key (the ``Idempotency-Key`` header for ``http``): only a downstream that honours
it can make a repeated delivery harmless. ``sandbox`` runs code in bubblewrap
(:mod:`.sandbox`); it has no effect outside its own scratch directory.

An ``http`` tool's answer is read as a stream and given up past ``max_result_bytes``, so a
downstream that answers without end costs at most that much memory. Its client decides where
it may connect (:mod:`.egress` for a tenant's tools).
"""

from __future__ import annotations

import contextlib
import json
import signal
from dataclasses import dataclass
from typing import Protocol

import httpx

from agentconsole.server.gateway.egress import DestinationRefused
from agentconsole.server.gateway.errors import EgressRefused, ToolFailed
from agentconsole.server.gateway.sandbox import Sandbox, SandboxRun, SandboxUnavailable
from agentconsole.server.gateway.sandbox_spec import CODE_ARGUMENT, SandboxSpec
from agentconsole.server.gateway.slots import FairSlots
from agentconsole.server.gateway.streams import read_at_most
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


#: The failure of a result over ``GatewayConfig.max_result_bytes`` (the executor's read cap
#: and the runner's check of the encoded result answer alike).
RESULT_TOO_LARGE = "the tool's result is too large"
#: How much of a downstream's error body is kept (under redaction ``full`` only).
ERROR_DETAIL_BYTES = 200


class ExecutionFailed(Exception):
    """The tool did not succeed.

    ``ambiguous``: the effect may have been applied (the request may have reached the
    downstream). ``permanent``: the downstream refused the call as such, so repeating it with
    the same arguments cannot succeed. ``kind``: the error type answered (``tool_failed``, or
    ``egress_refused`` when the egress policy refused the destination). ``detail``: the
    downstream's own words (its error body), which may quote the call's data, so the store
    keeps them only under redaction ``full``.
    """

    def __init__(
        self,
        message: str,
        *,
        ambiguous: bool,
        permanent: bool = False,
        kind: str = ToolFailed.type,
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.ambiguous = ambiguous
        self.permanent = permanent
        self.kind = kind
        self.detail = detail


class Executor(Protocol):
    """Runs invocations of one kind; the gateway applies the timeout around :meth:`run`."""

    async def run(self, invocation: Invocation) -> JSONValue:
        """Carry out ``invocation`` and return its result; raise :class:`ExecutionFailed`."""


class HttpExecutor:
    """POSTs ``{tool, tool_call_id, program_id, node_id, arguments}`` to the tool's URL with
    ``Idempotency-Key: <tool_call_id>``; a 2xx JSON body of at most ``max_bytes`` is the
    result."""

    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        max_bytes: int,
        slots: FairSlots | None = None,
    ) -> None:
        self._url = url
        self._client = client
        self._max_bytes = max_bytes
        #: the client's connections as the tenants share them (None: unshared)
        self._slots = slots

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
        hold: contextlib.AbstractAsyncContextManager[None] = (
            self._slots.hold(invocation.tenant) if self._slots else contextlib.nullcontext()
        )
        try:
            async with (
                hold,
                self._client.stream("POST", self._url, json=payload, headers=headers) as response,
            ):
                status = response.status_code
                if status >= 300:
                    body = await read_at_most(response.aiter_bytes(), ERROR_DETAIL_BYTES)
                    raise _refused_by_status(status, body)
                content = await read_at_most(response.aiter_bytes(), self._max_bytes)
        except DestinationRefused as error:  # refused before any connection: nothing sent
            raise ExecutionFailed(
                str(error), ambiguous=False, permanent=True, kind=EgressRefused.type
            ) from error
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as error:
            # Nothing was sent: the effect cannot have happened.
            raise ExecutionFailed(f"cannot reach the tool: {error!r}", ambiguous=False) from error
        except httpx.HTTPError as error:
            raise ExecutionFailed(f"tool request failed: {error!r}", ambiguous=True) from error
        if len(content) > self._max_bytes:
            # the request was answered, so an effect may have happened, as the runner's cap
            raise ExecutionFailed(RESULT_TOO_LARGE, ambiguous=True, permanent=True)
        try:
            result: JSONValue = json.loads(content)
        except ValueError as error:
            raise ExecutionFailed("tool answered with a non-JSON body", ambiguous=True) from error
        return result


def _refused_by_status(status: int, body: bytes) -> ExecutionFailed:
    """The failure of a non-2xx answer. A 4xx (but timeout/conflict/throttle) is the
    downstream refusing the call: not applied, and the same call will be refused again."""
    refused = 400 <= status < 500 and status not in (408, 409, 425, 429)
    return ExecutionFailed(
        f"tool answered HTTP {status}",
        ambiguous=not refused,
        permanent=refused,
        detail=body[:ERROR_DETAIL_BYTES].decode(errors="replace"),
    )


class SandboxExecutor:
    """Runs the call's ``code`` argument (or the tool's fixed script) in the sandbox, the
    other arguments as one JSON object on stdin; the result is :func:`sandbox_result`.

    A program that fails (an exception, an exit status, a limit) is a *result*, so the agent
    reads its traceback; only a sandbox that cannot run is a failure, and then nothing ran.
    """

    def __init__(self, sandbox: Sandbox, spec: SandboxSpec) -> None:
        self._sandbox = sandbox
        self._spec = spec

    async def run(self, invocation: Invocation) -> JSONValue:
        """One sandboxed run; no retry here."""
        arguments = dict(invocation.arguments)
        source = self._spec.script
        if source is None:
            code = arguments.pop(CODE_ARGUMENT, None)
            if not isinstance(code, str):
                raise ExecutionFailed(
                    f"the {CODE_ARGUMENT!r} argument must be a string",
                    ambiguous=False,
                    permanent=True,
                )
            source = code
        stdin = json.dumps(arguments, separators=(",", ":")).encode()
        try:
            done = await self._sandbox.run(
                self._spec.language, source, stdin, self._spec.limits, tenant=invocation.tenant
            )
        except SandboxUnavailable as error:
            message = f"sandbox unavailable: {error.message}"
            raise ExecutionFailed(message, ambiguous=False) from error
        except OSError as error:
            message = f"the sandbox cannot start: {error}"
            raise ExecutionFailed(message, ambiguous=False) from error
        if not done.started:
            detail = done.raw.stderr.decode(errors="replace").strip()[:300]
            raise ExecutionFailed(f"the sandbox did not start: {detail}", ambiguous=False)
        return sandbox_result(done)


def sandbox_result(done: SandboxRun) -> JSONValue:
    """``{exit_code, signal, stdout, stderr, truncated, killed, duration_s}``: ``exit_code``
    as a shell reports it (128 + N for signal N; ``null`` when the executor killed the
    sandbox: ``killed`` is then ``"timeout"`` or ``"output_limit"``)."""
    raw = done.raw
    code = raw.returncode
    name: str | None = None
    if code is not None and (code < 0 or 128 < code < 128 + signal.NSIG):
        try:
            name = signal.Signals(-code if code < 0 else code - 128).name
        except ValueError:
            name = None
    return {
        "exit_code": code,
        "signal": name,
        "stdout": raw.stdout.decode(errors="replace"),
        "stderr": raw.stderr.decode(errors="replace"),
        "truncated": raw.truncated,
        "killed": raw.killed,
        "duration_s": round(raw.duration_s, 3),
    }
