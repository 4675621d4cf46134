"""One call in flight through the SGLang engine: :class:`SGLangStream`, its token stream and
its final accounting.

The adapter's task of the call (``SGLangRuntime._pump``, the only task a call has) reads
SGLang's streamed chunks, which carry the cumulative text and ``meta_info.completion_tokens``,
and :meth:`SGLangStream.feed`s them: each new piece of text is pushed to the stream, whose
reader (the live service's call) takes it in that same task. Once :meth:`begin_abort` is called
nothing more is delivered: tokens the engine produces after that moment are dropped, and so are
produced-but-unread ones, so a caller that aborts never sees a token afterwards; an aborted
call's result counts what was read as its output, and every token the engine generated (its
last ``completion_tokens``: SGLang stops a call at its next step, not at once) as
``produced_tokens``, which the caller charges as ghost tokens.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from agentconsole.scheduler.runtime import (
    CONTEXT_LENGTH_EXCEEDED,
    GenerationRequest,
    GenerationResult,
    TokenDelta,
)
from agentconsole.scheduler.tokenstream import TokenStream
from agentconsole.server.runtime.sglang import wire


class SGLangStream(TokenStream):
    """The ``GenerationStream`` of one SGLang call and the adapter's state of it."""

    def __init__(self, request: GenerationRequest) -> None:
        super().__init__()
        self.request = request
        self.submitted = time.time()
        self.task: asyncio.Task[None] | None = None  # the adapter's task reading SGLang
        self.first_at: float | None = None
        self.rank: int | None = None  # the data-parallel rank it was sent to (None: one rank)
        self.text = ""  # engine text seen so far (cumulative)
        self.tokens = 0  # engine tokens delivered so far
        self.engine_tokens = 0  # engine tokens generated so far, delivered or not
        self.aborting = False
        self.meta: dict[str, Any] = {}
        # telemetry (``telemetry.Telemetry``): SGLang's prompt and output ids as streamed,
        # whether ``call.scheduled`` was emitted, and the estimated time spent recomputing
        # lost context
        self.prompt_ids: list[int] | None = None
        self.output_ids: list[int] | None = None
        self.scheduled = False
        self.restore_s = 0.0
        #: seconds in SGLang's queue so far (every spell), as the plugin last reported them
        #: (``wire.QUEUE_TIME_KEY``; None: not reported, as without the plugin)
        self.plugin_queue_s: float | None = None
        #: the last ``meta_info`` of an output of the engine's forward passes (None: it ran
        #: none); see :meth:`result_now`
        self.forward_meta: dict[str, Any] | None = None

    @property
    def rid(self) -> str:
        return self.request.ticket.call_id

    @property
    def ran(self) -> bool:
        """Whether the engine ran the call at all (a forward pass reported it, or it generated
        a token). One SGLang ended without running it (refused before queueing, a worker's
        400, aborted in the waiting queue or held at the drain gate) computed nothing and left
        nothing on the engine."""
        forward = "prompt_tokens" in self.meta or self.forward_meta is not None
        return forward or self.engine_tokens > 0

    @property
    def counted_meta(self) -> dict[str, Any]:
        """The ``meta_info`` whose figures count (``prompt_tokens``, ``cached_tokens``): the
        last chunk's, or, when that came from outside the batch outputs (an abort in the
        waiting queue after a retraction), the last forward pass's."""
        if "prompt_tokens" in self.meta or self.forward_meta is None:
            return self.meta
        return self.forward_meta

    def feed(self, chunk: dict[str, Any]) -> None:
        """Take one streamed chunk: deliver its new text unless an abort began."""
        meta = chunk.get("meta_info") or {}
        self.meta = meta
        if "prompt_tokens" in meta:  # SGLang's batch outputs carry it, and only they
            self.forward_meta = meta
        reported = _last_number(meta.get(wire.QUEUE_TIME_KEY))
        if reported is not None:
            self.plugin_queue_s = reported
        text = str(chunk.get("text") or "")
        tokens = int(meta.get("completion_tokens") or 0)
        if tokens > self.tokens and self.first_at is None:
            self.first_at = time.time()
        self.engine_tokens = max(self.engine_tokens, tokens)
        if self.aborting:
            return
        if tokens > self.tokens:
            delta = text[len(self.text) :] if text.startswith(self.text) else text
            self.push(TokenDelta(delta, tokens - self.tokens))
        self.text, self.tokens = text, tokens

    def begin_abort(self) -> None:
        """Stop delivery now and drop what was produced but not read."""
        self.aborting = True
        self.drop_unread()

    def finish(self, error: BaseException | None = None) -> None:
        """End the stream with the engine's last ``meta_info`` (or ``error``)."""
        if error is not None:
            self.fail(error)
        else:
            self.end(self.result_now())

    def result_now(self) -> GenerationResult:
        """The call's accounting from what the engine reported so far.

        SGLang 0.5.23 ends a call it takes out of its waiting queue (aborted there, or
        refused) outside its batch outputs (``Scheduler.abort_request`` ->
        ``send_abort_output``; ``TokenizerManager._handle_abort_req``): that last chunk's
        ``meta_info`` holds its id, finish reason ("Abort in waiting queue"),
        ``e2e_latency`` and ``completion_tokens``, but no ``prompt_tokens``,
        ``cached_tokens``, ``queue_time`` or ``num_retractions``. A call that ran before
        (retracted back to the queue) keeps the figures of its last forward pass; a call
        that never ran computed nothing and waited all along: its queue time is its whole
        time, its service none."""
        meta, now = self.meta, time.time()
        reason = meta.get("finish_reason")
        kind = str(reason.get("type")) if isinstance(reason, dict) else "abort"
        if self.aborting:
            kind = "abort"
        ran = self.ran
        counted = self.counted_meta  # the figures of its last forward
        e2e = now - self.submitted
        if ran:
            queue_s = (
                reported_queue_s(meta) or reported_queue_s(counted) or self.plugin_queue_s or 0.0
            )
        else:
            queue_s = e2e
        aborted = kind == "abort"
        # an abort the engine made itself names its cause (SGLang's FINISH_ABORT)
        engine_abort = reason if aborted and not self.aborting and isinstance(reason, dict) else {}
        status = engine_abort.get("status_code")
        message = str(engine_abort.get("message") or "")
        prompt_tokens = int(counted.get("prompt_tokens") or 0)
        if not ran:  # the prompt's length, as far as it is known here
            prompt_tokens = len(self.prompt_ids or self.request.prompt_ids or ())
        return GenerationResult(
            finish_reason=kind if kind in ("stop", "length", "abort") else "stop",
            text=self.read_text() if aborted else self.text,
            prompt_tokens=prompt_tokens,
            cached_tokens=int(counted.get("cached_tokens") or 0),
            output_tokens=self.read_tokens if aborted else self.tokens,
            queue_s=queue_s,
            ttft_s=(self.first_at - self.submitted) if self.first_at else 0.0,
            e2e_s=e2e,
            # residency in the engine: on a batching engine this is wall time in the running
            # batch, not a share of it (SGLang reports no per-request compute share)
            service_s=max(e2e - queue_s, 0.0),
            restore_s=self.restore_s,
            retractions=int(counted.get("num_retractions") or 0),
            engine_abort_status=int(status) if isinstance(status, int) else None,
            engine_abort_message=message,
            engine_abort_code=abort_code(status, message),
            produced_tokens=self.engine_tokens if aborted else None,
            prefilled_tokens=None if ran else 0,
        )


#: SGLang 0.5.23's refusals of a prompt its context cannot hold (400, with both lengths): its
#: tokenizer manager's (``_validate_one_request``: the input alone, the input and
#: ``max_new_tokens`` together) and its scheduler's (``validate_input_length``: an input over
#: the longest it takes, a few tokens short of the context, less where the KV pool is smaller)
_CONTEXT_REFUSALS = (
    "longer than the model's context length",
    "exceeds the model's maximum context length",
    "exceeds the maximum allowed length",
)


def abort_code(status: object, message: str) -> str | None:
    """The API's code of an abort SGLang made with ``status`` and ``message``:
    :data:`CONTEXT_LENGTH_EXCEEDED` for its refusal of a prompt too long (an agent trims its
    history on it, as on the intake's own refusal), else None."""
    if status == 400 and any(refusal in message for refusal in _CONTEXT_REFUSALS):
        return CONTEXT_LENGTH_EXCEEDED
    return None


def reported_queue_s(meta: Mapping[str, Any]) -> float | None:
    """The seconds a call waited in SGLang's queue, from a chunk's ``meta_info``: SGLang's own
    ``queue_time`` where its metrics are on, else the plugin's newest report of the same
    measure (``wire.QUEUE_TIME_KEY``); None when the chunk carries neither."""
    own = meta.get("queue_time")
    if isinstance(own, int | float):
        return float(own)
    return _last_number(meta.get(wire.QUEUE_TIME_KEY))


def _last_number(values: Any) -> float | None:
    """The last number of a ``customized_info`` list (the newest report; the rest None or
    older reports)."""
    if isinstance(values, list):
        for value in reversed(values):
            if isinstance(value, int | float):
                return float(value)
    return None
