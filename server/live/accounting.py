"""What happens when a call makes progress or ends: controller updates, events, quotas.

:class:`CallAccounting` is the :class:`~agentconsole.server.live.calls.CallHooks` of every
call. It turns the runtime's report into controller state (``first_token``, ``finish_llm``)
and into the call events every metric is computed from (``call.first_token``,
``call.finished`` / ``call.aborted`` / ``call.failed`` with the usage numbers
:class:`MetricsAggregator` reads, and ``call.ghost_tokens``), and it stops a call whose
program goes over its token quota (overshoot: at most one streamed delta).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentconsole.scheduler.controller import CallUsage, ProgramController, QuotaExceeded
from agentconsole.scheduler.events import Event, EventKind, EventSink, Scalar
from agentconsole.scheduler.program import NodeState, Program
from agentconsole.scheduler.runtime import GenerationResult
from agentconsole.server.live.errors import QuotaError, ServiceError
from agentconsole.server.live.servicemodel import OnlineServiceModel

if TYPE_CHECKING:
    from agentconsole.server.live.calls import LiveCall

QuotaStop = Callable[[str, ServiceError], None]


def usage_data(result: GenerationResult) -> dict[str, Scalar]:
    """The ``call.finished`` / ``call.aborted`` data keys of :mod:`scheduler.metrics`."""
    decode = max(result.output_tokens - 1, 0)
    tbt = (result.e2e_s - result.ttft_s) / decode if decode else 0.0
    return {
        "prompt_tokens": result.prompt_tokens,
        "cached_tokens": result.cached_tokens,
        "computed_tokens": max(result.prompt_tokens - result.cached_tokens, 0),
        "output_tokens": result.output_tokens,
        "service_s": result.service_s,
        "queue_s": result.queue_s,
        "restore_s": result.restore_s,
        "ttft_s": result.ttft_s,
        "tbt_s": tbt,
        "e2e_s": result.e2e_s,
        "retractions": result.retractions,
        "finish_reason": result.finish_reason,
    }


class CallAccounting:
    """Hooks of every call; ``on_quota(program_id, error)`` cancels an over-quota program."""

    def __init__(
        self,
        controller: ProgramController,
        sink: EventSink,
        model: OnlineServiceModel,
        on_quota: QuotaStop,
        on_end: Callable[[LiveCall], None],
    ) -> None:
        self.controller = controller
        self.sink = sink
        self.model = model
        self.on_quota = on_quota
        self.on_end = on_end

    def _emit(self, call: LiveCall, kind: EventKind, data: dict[str, Scalar]) -> None:
        attempt = int(call.call_id.rsplit("/", 1)[-1])
        self.sink.emit(
            Event(time.time(), kind, call.program_id, call.node_id, attempt, call.tenant, data)
        )

    def first_token(self, call: LiveCall) -> None:
        if call.program_id in self.controller.programs:
            self.controller.first_token(call.program_id, call.node_id, time.time())
        ttft = (call.first_token_at or call.submitted_at) - call.submitted_at
        self._emit(call, EventKind.CALL_FIRST_TOKEN, {"ttft_s": ttft})

    def progress(self, call: LiveCall) -> None:
        program = self.controller.programs.get(call.program_id)
        if program is None or call.closed:
            return
        quota = program.quotas.tokens
        if quota is not None and program.tokens_used + call.received > quota:
            error = QuotaError(
                call.program_id, "tokens", quota, program.tokens_used + call.received
            )
            call.stop(error)

    def ended(self, call: LiveCall, result: GenerationResult | None) -> None:
        """Account the call; never raises for a program that is gone."""
        now = time.time()
        self.on_end(call)
        program = self.controller.programs.get(call.program_id)
        if result is None:
            self._emit(call, EventKind.CALL_FAILED, {"reason": "runtime error"})
            if program is not None:
                self._close_node(program, call.node_id, "failed", now)
            return
        data = usage_data(result)
        if call.closed:
            data["reason"] = call.abort_reason
            self._emit(call, EventKind.CALL_ABORTED, data)
            if call.ghost:
                self._emit(call, EventKind.GHOST_TOKENS, {"tokens": call.ghost})
        else:
            self._emit(call, EventKind.CALL_FINISHED, data)
        uncached = max(result.prompt_tokens - result.cached_tokens, 0)
        self.model.observe(uncached, result.output_tokens, result.service_s)
        if program is None:
            return
        node = program.nodes.get(call.node_id)
        if node is None or node.state is not NodeState.RUNNING:
            if node is not None and node.attempts and node.attempts[-1].finished_at is None:
                node.attempts[-1].finished_at, node.attempts[-1].outcome = now, "aborted"
            return
        if call.closed and call.error is None:
            self._close_node(program, call.node_id, "aborted", now)
            return
        # The controller counts queue time from readiness to submission; the runtime knows
        # the time the call then waited inside the engine, which belongs there too.
        usage = CallUsage(
            result.prompt_tokens,
            result.cached_tokens,
            result.output_tokens,
            result.service_s,
            result.queue_s,
            result.restore_s,
            runtime_queue_s=result.queue_s,
        )
        try:
            self.controller.finish_llm(call.program_id, call.node_id, now, usage)
        except QuotaExceeded as exceeded:
            error = QuotaError(call.program_id, "tokens", exceeded.limit, exceeded.value)
            self.on_quota(call.program_id, call.error or error)
            return
        if call.error is not None:
            self.on_quota(call.program_id, call.error)

    def _close_node(self, program: Program, node_id: str, outcome: str, now: float) -> None:
        """End a running LLM node that will not finish (client gone, runtime failure)."""
        if node_id in program.nodes:
            self.controller.close_node(program.program_id, node_id, now, outcome)
