"""Claim, execute at most once per claim, commit: the durable half of the call pipeline.

Exactly-once is impossible in general, and this module does not pretend otherwise
(research §1.1): it gives exactly-once *recording* and, per tool class,

* read-only or idempotent tools (``auto_retry_safe``): at-least-once execution, every
  delivery carrying the same ``tool_call_id`` so an idempotent downstream applies it once;
* side-effecting tools without a downstream key: at-most-once. The intent is durable before
  the executor starts; if the process dies between the effect and the commit, start-up
  recovery marks the call ``needs_reconcile`` and no one re-runs it automatically. A timeout
  or an ambiguous error marks it ``needs_reconcile`` too (409 to the caller): the effect may
  or may not have happened, so an operator settles it (a result, or one more execution).

Each call runs in its own task, shielded from the HTTP request: a client that disconnects
mid-call does not strand an intent in progress, and concurrent duplicates attach to the one
execution and replay its result.

When the server begins to stop (:meth:`Runner.shut_down`, before the HTTP server waits for
its connections) read-only tools are interrupted and every caller is answered within
:data:`SHUTDOWN_ANSWER_S`: its result if the tool ends by then, else 503 ``unavailable``,
retryable with the same key (the execution goes on to its commit until :meth:`Runner.close`;
the retry replays its result, or finds it ``needs_reconcile``: it is never run twice).

A replayed result also reports the tool node's end to the program port (as the execution
does): after a crash the node was rebuilt as still running, and the replay is the only thing
left that can close it (a node already done ignores the report). The gateway replays a
committed result even once its program has ended (seed §12: the agent's retry of a side
effect that committed after a cancel reads the result), through :meth:`Runner.replayed`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.definition import ToolDefinition
from agentconsole.server.gateway.errors import (
    Conflict,
    GatewayError,
    IdempotencyMismatch,
    InProgress,
    NeedsReconcile,
    ProgramNotRunning,
    ShuttingDown,
    ToolFailed,
    ToolTimeout,
)
from agentconsole.server.gateway.executors import (
    RESULT_TOO_LARGE,
    ExecutionFailed,
    Executor,
    Invocation,
)
from agentconsole.server.gateway.outcome import (
    CallResult,
    decode_result,
    encode_failure,
    encode_result,
    failure_error,
)
from agentconsole.server.gateway.ports import (
    ProgramPort,
    ToolOutcome,
    ended_refusal,
    port_errors,
)
from agentconsole.server.gateway.redaction import stored_arguments, stored_result
from agentconsole.server.gateway.request import CallRequest
from agentconsole.server.store import (
    Claim,
    ClaimStatus,
    CommitOutcome,
    ToolIntents,
    make_tool_call_id,
    params_hash,
)
from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.jsonutil import JSONValue

log = logging.getLogger(__name__)
INTERRUPTED = "interrupted"
#: how long a caller waits for its tool once the server stops, before its 503: an
#: interrupted read-only tool records its end in that time, and uvicorn's grace (5 s) is
#: left for the answers to be written
SHUTDOWN_ANSWER_S = 1.0


class Release(Protocol):
    """Frees an admitted call's concurrency slot (once); ``ran=False`` for a call answered
    from the store (a retry of a call that ended: nothing ran), which gives its rate token
    back too, so a retry never costs the agent's next new call."""

    def __call__(self, *, ran: bool = True) -> None: ...


@dataclass(frozen=True, slots=True)
class Job:
    """One admitted, validated call; ``release`` frees its slot (called once)."""

    tool: ToolDefinition
    executor: Executor
    tenant: str
    request: CallRequest
    port: ProgramPort
    release: Release


@dataclass(frozen=True, slots=True)
class RunningTool:
    """A tool execution in flight (for cancel reports and the console)."""

    tool_call_id: str
    program_id: str
    #: the node the caller named
    node_id: str
    tool: str
    side_effect: bool
    #: the node the program core runs the tool as (``ProgramPort.tool_started``'s answer):
    #: the model's tool call's node when the caller named that call by its own id
    core_node_id: str


@dataclass(frozen=True, slots=True)
class CancelReport:
    """What cancelling a program did to its running tools: read-only ones were interrupted,
    side-effecting ones were left to finish (an effect must not be cut in half) and flagged."""

    interrupted: tuple[RunningTool, ...] = ()
    flagged: tuple[RunningTool, ...] = ()


@dataclass(slots=True)
class _Execution:
    info: RunningTool
    task: asyncio.Task[JSONValue]
    interrupted: bool = False
    #: interrupted by its node's own cancel (the program runs on), not its program's
    node_cancelled: bool = False


@dataclass(slots=True)
class _Failure:
    kind: str
    message: str
    outcome: ToolOutcome
    ambiguous: bool
    permanent: bool = False
    #: the downstream's own words: answered to the caller, stored under redaction full only
    detail: str = ""
    #: an interruption by the node's own cancel (the program runs on), not its program's
    node_cancelled: bool = False

    def said(self, *, with_detail: bool) -> str:
        """The message, followed by :attr:`detail` when asked for and there is one."""
        return f"{self.message}: {self.detail}" if with_detail and self.detail else self.message

    def text(self, *, with_detail: bool) -> str:
        """The stored (or answered) form, :func:`encode_failure`."""
        return encode_failure(self.kind, self.said(with_detail=with_detail), self.outcome)


def call_hash(tool: ToolDefinition, arguments: JSONValue) -> str:
    """The hash that tells a retry of a call (same tool, same arguments) from a new one."""
    return params_hash({"tool": tool.name, "arguments": arguments})


def _retrieve(task: asyncio.Task[CallResult]) -> None:
    if not task.cancelled():
        task.exception()  # the request may have gone; the error was answered or logged


@dataclass(slots=True)
class Runner:
    """Runs admitted calls through the intent state machine of the store."""

    intents: ToolIntents
    config: GatewayConfig
    crash: CrashPoints = field(default_factory=CrashPoints.from_env)
    #: Executor invocations so far (tests count them).
    executions: int = 0
    _calls: set[asyncio.Task[CallResult]] = field(default_factory=set)
    _running: dict[str, _Execution] = field(default_factory=dict)
    #: :meth:`shut_down` or :meth:`close` began: an interrupted tool is the server's stop,
    #: not a cancel
    _closing: bool = False
    #: :meth:`shut_down` began: new calls are refused
    _stopping: bool = False
    #: resolved by :meth:`shut_down`; every caller waits on this one future beside its call,
    #: so a call costs no watcher task of its own (made on the loop by the first call)
    _shutdown_future: asyncio.Future[None] | None = None

    async def run(self, job: Job) -> CallResult:
        """Claim ``job``'s key and execute, replay, attach or refuse; see the module doc.

        Raises the 4xx :class:`GatewayError` that answers a refused or failed call, or 503
        :class:`ShuttingDown` once the server stops. The work continues if the caller is
        cancelled or answered so; ``job.release`` is called when it ends.
        """
        key = make_tool_call_id(job.request.program_id, job.request.node_id, job.request.attempt)
        if self._stopping:
            job.release()
            raise _stopped(key, "the server is shutting down; retry the call")
        task = asyncio.create_task(self._run(job))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        task.add_done_callback(_retrieve)
        # asyncio.wait never cancels what it waits for: the call runs on if this caller is
        # cancelled (a disconnected client), as under a shield, and the shared future stays
        # pending for the other callers
        await asyncio.wait((task, self._shutdown_signal()), return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait((task,), timeout=SHUTDOWN_ANSWER_S)
        if not task.done():
            raise _stopped(
                key,
                "the server is shutting down before the tool ended: retry the call with the"
                " same key (a result committed meanwhile is replayed; nothing runs twice)",
            )
        return task.result()

    def _shutdown_signal(self) -> asyncio.Future[None]:
        """The future :meth:`shut_down` resolves, made on the running loop when first asked."""
        if self._shutdown_future is None:
            self._shutdown_future = asyncio.get_running_loop().create_future()
        return self._shutdown_future

    async def _run(self, job: Job) -> CallResult:
        try:
            req, tool = job.request, job.tool
            key = make_tool_call_id(req.program_id, req.node_id, req.attempt)
            claim = await asyncio.wrap_future(
                self.intents.claim(
                    key,
                    call_hash(tool, req.arguments),
                    req.program_id,
                    req.node_id,
                    tool.name,
                    side_effect=tool.side_effect,
                    idempotent=tool.idempotent,
                    lease_s=tool.timeout_s + self.config.lease_grace_s,
                    arguments=stored_arguments(
                        req.arguments, self.config.redaction_for(job.tenant)
                    ),
                )
            )
            if claim.execute:
                return await self._execute(job, claim)
            job.release(ran=False)
            return await self._answer(job, claim)
        finally:
            job.release()

    async def replayed(self, request: CallRequest, port: ProgramPort, claim: Claim) -> CallResult:
        """Answer the committed ``claim`` and report the tool node's end with its stored
        outcome (a node rebuilt running after a crash is closed by it; the port ignores the
        report for a node that is not running). Skipped while this process runs the same
        node under another key (a new attempt): that execution reports its own end."""
        result = decode_result(claim.tool_call_id, claim.result_json)
        node = (request.program_id, request.node_id)
        if not any((e.info.program_id, e.info.node_id) == node for e in self._running.values()):
            size = len(claim.result_json or "")
            await _report_end(port, request, "ok", result.latency_s, size)
        return result

    async def _answer(self, job: Job, claim: Claim) -> CallResult:
        key = claim.tool_call_id
        ids: dict[str, JSONValue] = {"tool_call_id": key}
        if claim.status is ClaimStatus.IN_PROGRESS:
            claim = await self._attach(job, key)
            if claim.status is ClaimStatus.COMMITTED:  # its execution reports the node's end
                return decode_result(key, claim.result_json)
        if claim.status is ClaimStatus.COMMITTED:
            return await self.replayed(job.request, job.port, claim)
        if claim.status is ClaimStatus.FAILED:
            raise failure_error(key, claim.error, retryable=claim.retryable, replayed=True)
        if claim.status is ClaimStatus.MISMATCH:
            raise IdempotencyMismatch(
                "this tool_call_id was first called with other arguments; call with a new"
                " attempt number to run the tool with new ones",
                field="arguments",
                extra=ids,
            )
        if claim.status is ClaimStatus.NEEDS_RECONCILE:
            raise in_doubt(key, claim.error)
        raise InProgress("the call is still in progress; retry later", extra=ids)

    async def _attach(self, job: Job, key: str) -> Claim:
        wait = job.tool.timeout_s + self.config.attach_grace_s
        try:
            claim = await asyncio.wait_for(asyncio.wrap_future(self.intents.attach(key)), wait)
        except TimeoutError:
            claim = None
        if claim is None or claim.status is ClaimStatus.IN_PROGRESS:
            raise InProgress(
                "a call with this tool_call_id is still in progress; retry later",
                extra={"tool_call_id": key},
            )
        return claim

    async def _execute(self, job: Job, claim: Claim) -> CallResult:
        req, tool, key = job.request, job.tool, claim.tool_call_id
        try:
            async with port_errors():
                core_node = await job.port.tool_started(req.program_id, req.node_id)
        except Exception as error:  # nothing ran: the same key may run later
            await self._fail(key, claim.epoch, _Failure("not_started", str(error), "fail", False))
            if not isinstance(error, GatewayError):
                raise
            # a cancel that landed since the gateway's checks (while the intent was claimed)
            answer = ended_refusal(error)
            raise answer from error.__cause__
        info = RunningTool(
            key, req.program_id, req.node_id, tool.name, tool.side_effect, core_node or req.node_id
        )
        invocation = Invocation(
            tool.name, key, job.tenant, req.program_id, req.node_id, req.arguments
        )
        started = time.monotonic()
        self.executions += 1
        execution = _Execution(info, asyncio.create_task(job.executor.run(invocation)))
        self._running[key] = execution
        failure: _Failure | None = None
        result: JSONValue = None
        try:
            result = await asyncio.wait_for(execution.task, tool.timeout_s)
        except TimeoutError:
            failure = _Failure(
                ToolTimeout.type, f"no answer within {tool.timeout_s:g} s", "timeout", True
            )
        except ExecutionFailed as error:
            failure = _Failure(
                error.kind,
                error.message,
                "fail",
                error.ambiguous,
                error.permanent,
                error.detail,
            )
        except asyncio.CancelledError:
            failure = _Failure(INTERRUPTED, "the tool was interrupted", "fail", tool.side_effect)
            failure.node_cancelled = execution.node_cancelled
            if not execution.interrupted:
                # The gateway is closing. A re-executable call is released for a retry; an
                # effect in doubt stays in progress, so the next start flags it for operators.
                if tool.auto_retry_safe:
                    await self._fail(key, claim.epoch, failure)
                raise
        except Exception as error:
            log.exception("tool %s executor crashed", tool.name)
            failure = _Failure(ToolFailed.type, f"executor error: {error!r}"[:500], "fail", True)
        finally:
            self._running.pop(key, None)
        self.crash.hit("after_external_call")
        latency = time.monotonic() - started
        text = ""
        if failure is None:
            try:
                text = encode_result(result, latency)
            except (TypeError, ValueError):
                failure = _Failure(
                    ToolFailed.type, "the tool's result is not JSON", "fail", True, True
                )
        if failure is None and len(text) > self.config.max_result_bytes:
            failure = _Failure(ToolFailed.type, RESULT_TOO_LARGE, "fail", True, True)
        if failure is not None:
            return await self._failed(job, claim, failure, latency)
        mode = self.config.redaction_for(job.tenant)
        if mode != "full":  # what is stored; the caller still gets the result itself
            text = stored_result(result, latency, mode)
        outcome = await asyncio.wrap_future(self.intents.commit(key, text, claim.epoch))
        await self._finished(job, "ok", latency, len(text))
        if outcome is CommitOutcome.ACCEPTED:
            return CallResult(key, "committed", result, latency)
        # Fenced off: the key was re-claimed meanwhile; answer what that execution settles.
        return await self._answer(job, await self._attach(job, key))

    async def _failed(
        self, job: Job, claim: Claim, failure: _Failure, latency: float
    ) -> CallResult:
        # the caller gets the downstream's words; the store keeps them under redaction full
        keep_detail = self.config.redaction_for(job.tenant) == "full"
        if failure.ambiguous and not job.tool.auto_retry_safe and failure.kind != INTERRUPTED:
            # the effect may have happened: an operator decides, nothing re-runs it
            text = failure.text(with_detail=keep_detail)
            await asyncio.wrap_future(self.intents.flag(claim.tool_call_id, text, claim.epoch))
            await self._finished(job, failure.outcome, latency)
            # said as a retry will say it, from what the intent now records (with the detail)
            raise in_doubt(claim.tool_call_id, failure.text(with_detail=True))
        retryable = not failure.permanent and (not failure.ambiguous or job.tool.auto_retry_safe)
        await self._fail(claim.tool_call_id, claim.epoch, failure, retryable, keep_detail)
        await self._finished(job, failure.outcome, latency)
        if failure.kind == INTERRUPTED and self._closing:
            # the program lives on: its agent retries on the next server (a 409 would tell
            # it the program was cancelled)
            raise _stopped(
                claim.tool_call_id,
                "the server is shutting down; the tool was interrupted: retry the call",
            )
        if failure.kind == INTERRUPTED and failure.node_cancelled:
            raise Conflict(
                "the node was cancelled while its tool ran; the tool was interrupted",
                field="node_id",
                extra={"tool_call_id": claim.tool_call_id, "retryable": retryable},
            )
        if failure.kind == INTERRUPTED:
            raise ProgramNotRunning(
                "the program was cancelled while its tool ran; the tool was interrupted",
                extra={"tool_call_id": claim.tool_call_id, "retryable": retryable},
            )
        answer = failure.text(with_detail=True)
        raise failure_error(claim.tool_call_id, answer, retryable=retryable, replayed=False)

    async def _fail(
        self,
        key: str,
        epoch: int,
        failure: _Failure,
        retryable: bool = True,
        keep_detail: bool = False,
    ) -> None:
        """Record ``failure`` on the intent (with its detail only if ``keep_detail``)."""
        text = failure.text(with_detail=keep_detail)
        await asyncio.wrap_future(self.intents.fail(key, text, epoch, retryable=retryable))

    async def _finished(
        self, job: Job, outcome: ToolOutcome, latency: float, result_bytes: int = 0
    ) -> None:
        await _report_end(job.port, job.request, outcome, latency, result_bytes)

    def running(self) -> list[RunningTool]:
        """Executions in flight, oldest first."""
        return [e.info for e in self._running.values()]

    def cancel_program(self, program_id: str) -> CancelReport:
        """Interrupt ``program_id``'s running read-only tools; flag its side-effecting ones,
        which finish and commit (seed §12: an effect is not cut off half way). Only executions
        still running are interrupted: one whose executor answered (its task done, its
        result about to commit) is not, and ends as it ran."""
        interrupted: list[RunningTool] = []
        flagged: list[RunningTool] = []
        for execution in list(self._running.values()):
            if execution.info.program_id != program_id:
                continue
            if execution.info.side_effect:
                flagged.append(execution.info)
            elif execution.task.cancel():  # (not an executor that answered already)
                execution.interrupted = True
                interrupted.append(execution.info)
        return CancelReport(tuple(interrupted), tuple(flagged))

    def cancel_nodes(self, program_id: str, node_ids: Collection[str]) -> list[RunningTool]:
        """Interrupt the running read-only tools of ``node_ids`` of ``program_id`` (a node
        cancel: the program runs on; its side effects run on to their commit). ``node_ids``
        are the core's (``RunningTool.core_node_id``). Their callers get 409 ``conflict``
        naming the node's cancel. Returns those interrupted: only executions still running
        (one whose executor ended and awaits its commit is not, and ends as it ran)."""
        interrupted: list[RunningTool] = []
        for execution in list(self._running.values()):
            info = execution.info
            if info.program_id != program_id or info.core_node_id not in node_ids:
                continue
            if not info.side_effect and execution.task.cancel():
                execution.interrupted = execution.node_cancelled = True
                interrupted.append(info)
        return interrupted

    def shut_down(self) -> None:
        """The server begins to stop: refuse new calls (503), interrupt read-only executions
        and answer every caller within :data:`SHUTDOWN_ANSWER_S` (side effects run on to
        their commit, until :meth:`close`)."""
        self._stopping = True
        if self._shutdown_future is not None and not self._shutdown_future.done():
            self._shutdown_future.set_result(None)
        self._interrupt_read_only()

    def _interrupt_read_only(self) -> None:
        self._closing = True
        for execution in list(self._running.values()):
            if not execution.info.side_effect:
                execution.interrupted = True
                execution.task.cancel()

    async def close(self, timeout: float) -> None:
        """Interrupt read-only executions, give the others ``timeout`` seconds to commit,
        then cancel what is left (start-up recovery settles those intents)."""
        self._interrupt_read_only()
        if self._calls:
            _, pending = await asyncio.wait(set(self._calls), timeout=timeout)
            for task in pending:
                task.cancel()


def in_doubt(tool_call_id: str, stored_error: str | None) -> NeedsReconcile:
    """The 409 ``needs_reconcile`` refusal of the side-effecting call ``tool_call_id``, whose
    effect is in doubt, saying what left it so from what its intent records (``error``, as
    :func:`encode_failure` wrote it): the executor timed out, the executor failed mid-call, or
    nothing (start-up recovery found the intent still in progress: a crash interrupted the
    call). The first answer and every retry's (on any program state) say the same."""
    if stored_error is None:
        cause = "a crash interrupted this side-effecting call (the server stopped while it ran)"
    else:
        failure = failure_error(tool_call_id, stored_error, retryable=False, replayed=True)
        if isinstance(failure, ToolTimeout):
            cause = f"the executor timed out on this side-effecting call ({failure.message})"
        else:
            cause = f"the executor failed mid-call on this side-effecting call ({failure.message})"
    return NeedsReconcile(
        f"{cause}: its effect may or may not have happened, so it is never re-run"
        " automatically; an operator must reconcile it"
        " (POST /v1/operator/tool-calls/{tool_call_id}/reconcile)",
        extra={"tool_call_id": tool_call_id, "retryable": False},
    )


def _stopped(tool_call_id: str, message: str) -> ShuttingDown:
    return ShuttingDown(
        message,
        extra={"tool_call_id": tool_call_id, "retryable": True},
        headers={"Retry-After": "5"},
    )


async def _report_end(
    port: ProgramPort,
    request: CallRequest,
    outcome: ToolOutcome,
    latency: float,
    result_bytes: int,
) -> None:
    """Tell the program core that ``request``'s tool node ended; never raises."""
    try:
        await port.tool_finished(
            request.program_id, request.node_id, outcome, latency, result_bytes
        )
    except Exception:  # the result is committed whatever the core thinks of it now
        log.exception("tool_finished failed for %s", request.program_id)
