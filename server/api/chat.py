"""``POST /v1/chat/completions`` (OpenAI-compatible, streaming or not) and ``GET /v1/models``.

Program identity comes from the body's ``agentconsole`` object, else from the ``X-Program-Id``
/ ``X-Node-Id`` / ``X-Parent-Ids`` headers, else the call joins an inferred program.

Disconnects: the call runs in the live service, not in the handler, so a client that goes
away must be noticed. Streaming: Litestar 2.25 cancels the response's task group on
``http.disconnect``; the body generator's ``finally`` then starts the abort (synchronously:
inside a cancelled anyio scope every ``await`` is cancelled again), and the response's
background task does the same in case the cancellation hit while the generator was suspended.
Non-streaming: the handler races the call against ``http.disconnect`` on the ASGI receive
channel and aborts the call if the client leaves first.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.background_tasks import BackgroundTask
from litestar.params import JSONBody
from litestar.response import Stream

from agentconsole.server.api.deps import LiveDep, PrincipalDep
from agentconsole.server.api.errors import ApiError
from agentconsole.server.api.openai_format import (
    DONE,
    Completion,
    tool_calls_json,
    usage_json,
)
from agentconsole.server.api.schemas import ID_PATTERN, ChatCompletionRequest, NamedToolChoice
from agentconsole.server.live.admission import ChatCall
from agentconsole.server.live.calls import CallOutcome, LiveCall
from agentconsole.server.live.errors import Conflict
from agentconsole.server.live.prompt import ToolCallFilter, parse_tool_calls

_ID = re.compile(ID_PATTERN)
QUICK_S = 0.05


def _header_id(request: Request[Any, Any, Any], name: str) -> str | None:
    value = request.headers.get(name)
    if value is None:
        return None
    value = value.strip()
    if not _ID.match(value):
        raise ApiError(422, f"{name} must match {ID_PATTERN}", field=name)
    return value


def chat_call(
    data: JSONBody[ChatCompletionRequest], request: Request[Any, Any, Any], live: LiveDep
) -> ChatCall:
    """The service's view of a validated chat request (identity, limits, defaults)."""
    extras = data.agentconsole
    program_id = extras.program_id if extras and extras.program_id else None
    program_id = program_id or _header_id(request, "x-program-id")
    node_id = extras.node_id if extras and extras.node_id else _header_id(request, "x-node-id")
    parents: tuple[str, ...] | None = None
    if extras is not None and extras.parent_ids is not None:
        parents = tuple(extras.parent_ids)
    elif (raw := request.headers.get("x-parent-ids")) is not None:
        parents = tuple(p.strip() for p in raw.split(",") if p.strip())
        if any(not _ID.match(p) for p in parents):
            raise ApiError(422, f"X-Parent-Ids must be ids matching {ID_PATTERN}", field=raw)
    max_tokens = data.max_completion_tokens or data.max_tokens or live.config.default_max_tokens
    if max_tokens > live.config.max_tokens_limit:
        limit = live.config.max_tokens_limit
        raise ApiError(422, f"max_tokens must be at most {limit}", field="max_tokens")
    stop = (data.stop,) if isinstance(data.stop, str) else tuple(data.stop or ())
    choice = data.tool_choice
    tool_choice = choice.model_dump() if isinstance(choice, NamedToolChoice) else choice or "auto"
    return ChatCall(
        messages=[m.model_dump(exclude_none=True) for m in data.messages],
        max_tokens=max_tokens,
        tools=[t.model_dump(exclude_none=True) for t in data.tools] if data.tools else None,
        tool_choice=tool_choice,
        temperature=1.0 if data.temperature is None else data.temperature,
        top_p=1.0 if data.top_p is None else data.top_p,
        stop=stop,
        program_id=program_id,
        node_id=node_id,
        parent_ids=parents,
        deadline_s=extras.deadline_s if extras else None,
        labels=dict(extras.labels or {}) if extras else {},
        priority=data.priority,
        ignore_eos=data.ignore_eos,
    )


def _refusal(call: LiveCall, outcome: CallOutcome) -> Exception | None:
    """Why a call that did not complete is answered with an error (None: it completed)."""
    if outcome.error is not None:
        return outcome.error
    if outcome.finish_reason in ("abort", "error"):
        why = call.abort_reason or "runtime error"
        return Conflict(f"the call was aborted ({why})")
    return None


async def _stream(
    call: LiveCall, completion: Completion, include_usage: bool
) -> AsyncIterator[bytes]:
    done = False
    try:
        yield completion.chunk({"role": "assistant", "content": ""}, extra=completion.identity)
        held = ToolCallFilter(call.tools_offered)
        async for delta in call.deltas():
            text = held.feed(delta.text)
            if text:
                yield completion.chunk({"content": text})
        outcome = await call.outcome()
        refusal = _refusal(call, outcome)
        if refusal is not None:
            kind = getattr(refusal, "type", "error")
            yield completion.error(kind, str(refusal))
        else:
            rest, calls = held.finish()
            if rest:
                yield completion.chunk({"content": rest})
            reason = outcome.finish_reason
            if calls:
                yield completion.chunk({"tool_calls": tool_calls_json(call.call_id, calls)})
                reason = "tool_calls"
            yield completion.chunk({}, reason, extra=completion.identity)
            if include_usage:
                yield completion.chunk({}, usage=usage_json(outcome.result, call.received))
        yield DONE
        done = True
    finally:
        if not done:
            call.abandon("disconnect")


async def _wait_for_client_or_call(request: Request[Any, Any, Any], call: LiveCall) -> bool:
    """True once the call has ended; False if the client disconnected first. Calls that end
    within ``QUICK_S`` are not raced against the client (two tasks per call cost more than
    such a call)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(QUICK_S):
            await call.outcome()
            return True

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    ended = asyncio.ensure_future(call.outcome())
    gone = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({ended, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (ended, gone):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return call.finished


class ChatController(Controller):
    """OpenAI-compatible chat completions."""

    path = "/v1"
    tags = ("agents",)

    @post("/chat/completions", status_code=200, summary="Create a chat completion")
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[ChatCompletionRequest],
        live: LiveDep,
        principal: PrincipalDep,
    ) -> Response[Any]:
        """OpenAI chat completion; ``stream: true`` answers Server-Sent Events ending with
        ``data: [DONE]``. See docs/API.md for the agentconsole extras and errors."""
        call = await live.service.start_call(principal.tenant, chat_call(data, request, live))
        rid = data.rid or data.request_id or call.call_id.replace("/", "-")
        identity = {"program_id": call.program_id, "node_id": call.node_id, "call_id": call.call_id}
        headers = {
            "X-Program-Id": call.program_id,
            "X-Node-Id": call.node_id,
            "X-Request-Id": rid,
        }
        completion = Completion(rid, data.model or live.config.model_name, identity)
        if data.stream:
            usage = bool(data.stream_options and data.stream_options.include_usage)
            return Stream(
                _stream(call, completion, usage),
                media_type="text/event-stream",
                headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                background=BackgroundTask(call.abandon, "disconnect"),
            )
        if not await _wait_for_client_or_call(request, call):
            call.abandon("disconnect")
            return Response({}, status_code=499, headers=headers)
        outcome = await call.outcome()
        refusal = _refusal(call, outcome)
        if refusal is not None:
            raise refusal
        calls = parse_tool_calls(outcome.text) if call.tools_offered else None
        tool_calls = tool_calls_json(call.call_id, calls) if calls else None
        reason = "tool_calls" if tool_calls else outcome.finish_reason
        body = completion.response(
            outcome.text, tool_calls, reason, usage_json(outcome.result, call.received)
        )
        return Response(body, headers=headers)

    @get("/models", summary="The served model")
    async def models(self, live: LiveDep, principal: PrincipalDep) -> dict[str, Any]:
        """OpenAI model list with the one served model."""
        del principal  # any valid key may list the model
        return {
            "object": "list",
            "data": [
                {
                    "id": live.config.model_name,
                    "object": "model",
                    "created": int(live.started_at),
                    "owned_by": "agentconsole",
                }
            ],
        }
