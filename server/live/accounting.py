"""What happens when a call makes progress or ends: events, the driver, quotas.

:class:`CallAccounting` is the :class:`~agentconsole.server.live.calls.CallHooks` of every
call. It turns the runtime's report into the call events every metric is computed from
(``call.first_token``, ``call.finished`` / ``call.aborted`` / ``call.failed`` with the usage
numbers :class:`MetricsAggregator` reads, and ``call.ghost_tokens``) and reports the call's end
to the program driver, which completes or closes its node. A prompt that repeats the program's
previous one with tokens inserted mid-prompt adds the insertion to the end event
(``insertions.py``, ``insertionbook.py``). Every token a call caused is
charged to its program, aborted or not: tokens streamed before an abort and ghost tokens
(produced after it) count towards usage, quotas and attained service. Its prompt is charged
for what the engine computed of it (``GenerationResult.computed_tokens``): nothing for a call
aborted while it waited in the engine's queue, never scheduled. While a call streams,
the tokens all of the program's calls in flight have received, and their uncached prompts,
count against its token quota, so parallel streams cannot together go past it (overshoot: at
most one streamed delta per stream); a call whose prompt alone would pass it is refused at
its start (``ProgramService.check_call_tokens``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from agentconsole.scheduler.controller import CallUsage
from agentconsole.scheduler.events import Event, EventKind, EventSink, Scalar
from agentconsole.scheduler.program import NodeState
from agentconsole.scheduler.runtime import GenerationResult
from agentconsole.server.live.errors import QuotaError
from agentconsole.server.live.insertionbook import insertion_data
from agentconsole.server.live.servicemodel import OnlineServiceModel

if TYPE_CHECKING:
    from agentconsole.server.live.calls import LiveCall
    from agentconsole.server.live.service import ProgramService


def streamed_tokens(call: LiveCall) -> int:
    """The output tokens ``call`` has cost so far: delivered to its client, and produced
    after an abort was asked (ghost). What a call that ends without the runtime's accounting
    pays (a runtime failure here, a crash at the restart: ``reopen.py``)."""
    return call.received + call.ghost


def taken_prompt_tokens(result: GenerationResult) -> int:
    """The prompt tokens the engine took in: the whole prompt, except for a call aborted
    before its prefill ended: its cached tokens and those it computed (none at all for a call
    that never left the engine's queue; its ``call.queued`` event says how long its prompt
    was). What the end event records and the controller is told, which charge it ``prompt -
    cached``: so the restart's replay of the event (``eventtail.py``) charges what was
    charged live."""
    if result.prefilled_tokens is None:
        return result.prompt_tokens
    return result.cached_tokens + result.prefilled_tokens


def usage_data(result: GenerationResult) -> dict[str, Scalar]:
    """The ``call.finished`` / ``call.aborted`` data keys of :mod:`scheduler.metrics`."""
    decode = max(result.output_tokens - 1, 0)
    tbt = (result.e2e_s - result.ttft_s) / decode if decode else 0.0
    return {
        "prompt_tokens": taken_prompt_tokens(result),
        "cached_tokens": result.cached_tokens,
        "computed_tokens": result.computed_tokens,
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
    """Hooks of every call of ``service``."""

    def __init__(self, service: ProgramService, sink: EventSink, model: OnlineServiceModel) -> None:
        self.service = service
        self.sink = sink
        self.model = model

    def _emit(self, call: LiveCall, kind: EventKind, data: dict[str, Scalar]) -> None:
        attempt = call.request.ticket.attempt
        self.sink.emit(
            Event(time.time(), kind, call.program_id, call.node_id, attempt, call.tenant, data)
        )

    def first_token(self, call: LiveCall) -> None:
        controller = self.service.controller
        if call.program_id in controller.programs:
            controller.first_token(call.program_id, call.node_id, time.time())
        ttft = (call.first_token_at or call.submitted_at) - call.submitted_at
        self._emit(call, EventKind.CALL_FIRST_TOKEN, {"ttft_s": ttft})

    def progress(self, call: LiveCall) -> None:
        """A call preempted by an operator that delivers again runs again (its node was
        requeued, ``OperatorDesk.preempt``); stop the call when the program's finished calls
        plus what all its calls in flight received and their uncached prompts (charged at
        their end) go past its token quota."""
        program = self.service.controller.programs.get(call.program_id)
        if program is None or call.closed:
            return
        node = program.nodes.get(call.node_id)
        if node is not None and node.state is NodeState.READY:
            self.service.controller.resume_node(call.program_id, call.node_id)
        if program.quotas.tokens is None:
            return
        used = self.service.tokens_held(program)
        if used > program.quotas.tokens:
            call.stop(QuotaError(call.program_id, "tokens", program.quotas.tokens, used))

    def ended(self, call: LiveCall, result: GenerationResult | None) -> None:
        """Account the call and report its end to the driver; never raises for a program
        that is gone."""
        svc = self.service
        now = time.time()
        svc.unregister(call)
        svc.tenants.release(call.hold)
        if result is None:
            # the runtime failed mid-answer: what already reached the client is still paid
            streamed = streamed_tokens(call)
            failed = {"reason": "runtime error", "outcome": "failed"}
            self._emit(call, EventKind.CALL_FAILED, {**failed, "charged_output_tokens": streamed})
            paid = None
            if streamed:
                paid = CallUsage(0, 0, streamed, 0.0)
                svc.tenants.charge_tokens(call.tenant, streamed, now)
            self._report(call, paid, "failed", now)
            return
        charged = max(result.output_tokens, call.received + call.ghost)
        # what of its prompt the engine computed: all of what was not cached, except for a
        # call aborted before its prefill ended (none of it, if it never left the queue)
        computed = result.computed_tokens
        # The controller counts queue time from readiness to submission; the runtime knows
        # the time the call then waited inside the engine, which belongs there too.
        usage = CallUsage(
            taken_prompt_tokens(result),  # less the cached ones: what was computed
            result.cached_tokens,
            # an aborted call pays for what it streamed and for its ghost tokens
            charged if call.closed else result.output_tokens,
            result.service_s,
            result.queue_s,
            result.restore_s,
            runtime_queue_s=result.queue_s,
        )
        # a quota stop keeps what was produced as the node's answer (the program is cancelled
        # next); any other stop (an abort, a shutdown) is an aborted attempt
        quota = call.error if isinstance(call.error, QuotaError) else None
        outcome = "ok" if not call.closed or quota is not None else "aborted"
        # an abort this server did not ask for is the engine's (out of memory, a retraction
        # with nowhere to go): the call failed, its node did not complete
        engine_failed = result.finish_reason == "abort" and not call.closed
        if engine_failed:
            outcome = "failed"
        data = usage_data(result)
        # what the driver is told, so a restart can replay the end exactly (eventtail.py)
        data.update(outcome=outcome, charged_output_tokens=usage.output_tokens)
        if call.request.model is not None:  # several models: which one ran it (metrics)
            data["model"] = call.request.model
        self._record_prompt(call, result, now)
        data.update(self._insertion(call, result))
        # of what another model held, what this one prefilled again (a call aborted before
        # its prefill ended took in only the start of its prompt, if any of it)
        held = call.cached_elsewhere
        if result.prefilled_tokens is not None:
            held = min(held, taken_prompt_tokens(result))
        lost_elsewhere = held - result.cached_tokens
        if lost_elsewhere > 0:
            data["cross_model_lost_tokens"] = lost_elsewhere
        if call.closed:
            data["reason"] = call.abort_reason
            self._emit(call, EventKind.CALL_ABORTED, data)
            if call.ghost:
                self._emit(call, EventKind.GHOST_TOKENS, {"tokens": call.ghost})
        elif engine_failed:
            self._emit(call, EventKind.CALL_FAILED, {**data, "reason": "engine abort"})
        else:
            self._emit(call, EventKind.CALL_FINISHED, data)
        self.model.observe(computed, result.output_tokens, result.service_s)
        svc.tenants.charge_tokens(call.tenant, computed + charged, now)
        try:
            if outcome == "ok" and not call.closed and call.tools:
                runtime = svc.models.runtime_of(call.request.model)  # the format that ran it
                text, calls = runtime.chat_format.parse(call.text, call.tools)
                # ``parallel_tool_calls: false``: the first call is the answer, and the one
                # tool node; the others the model wrote are dropped (slicing by None: all)
                call.answer = (text, calls[: call.max_tool_calls])
        finally:
            # whatever the answer's parse did, the driver hears of the end (else the node
            # stays running and the program never finishes)
            self._report(call, usage, outcome, now, quota)
        if call.answer is not None and call.answer[1]:  # the agent runs these tools now
            names = [name for name, _ in call.answer[1]]
            svc.tool_calls.asked(call.program_id, call.node_id, call.call_id, names)

    def _record_prompt(self, call: LiveCall, result: GenerationResult, now: float) -> None:
        """The call's prompt structure to the store (salted block hashes, no text)."""
        recorder = self.service.prompt_blocks
        if recorder is None:
            return
        request = call.request
        recorder.record(
            program_id=call.program_id,
            node_id=call.node_id,
            attempt=request.ticket.attempt,
            call_id=call.call_id,
            tenant=call.tenant,
            ts=now,
            prompt=(request.prompt_ids, request.prompt),
            prompt_tokens=result.prompt_tokens,
            cached_tokens=result.cached_tokens,
        )

    def _insertion(self, call: LiveCall, result: GenerationResult) -> dict[str, Scalar]:
        """The end event's insertion keys when this prompt repeats the program's previous one
        with tokens put in the middle (``insertions.py``); also kept on the call for the
        response's ``X-Agentconsole-Lost-Reuse-Tokens``."""
        request = call.request
        found = self.service.prompt_memory.observe(
            call.program_id,
            (request.prompt_ids, request.prompt),
            # what the engine took in: a call that never ran its prefill lost no reuse
            prompt_tokens=taken_prompt_tokens(result),
            cached_tokens=result.cached_tokens,
        )
        if found is None:
            return {}
        call.lost_reuse_tokens = found.lost_reuse_tokens
        return insertion_data(found.at_token, found.inserted_tokens, found.lost_reuse_tokens)

    def _report(
        self,
        call: LiveCall,
        usage: CallUsage | None,
        outcome: str,
        now: float,
        quota: QuotaError | None = None,
    ) -> None:
        svc = self.service
        actions = svc.driver.call_ended(
            call.program_id, call.node_id, call.call_id, now, usage, outcome=outcome
        )
        svc.settle(actions)
        if quota is not None:  # stopped by a quota while it streamed
            svc.spawn(svc.stop_for_quota(call.program_id, quota))
