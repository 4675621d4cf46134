"""``POST /v1/chat/completions`` (OpenAI-compatible, streaming or not) and ``GET /v1/models``.

Program identity comes from the body's ``agentconsole`` object, else from the ``X-Program-Id``
/ ``X-Node-Id`` / ``X-Parent-Ids`` headers, else the call joins an inferred program.

The prompt, the tool-call parse and the streaming filter that keeps tool-call markup from the
client all come from the runtime's chat format (the served model's own template and parser on
SGLang, ChatML on the simulator); a response's ``model`` is the name of the model that ran
it (several served: the request's, or the selector's choice, ``live/modeldesk.py``).

Disconnects and the rest both endpoints share: :mod:`callflow`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, JSONBody
from litestar.response import Stream

from agentconsole.scheduler.runtime import ToolCallStream
from agentconsole.server.api.auth import Principal
from agentconsole.server.api.callflow import (
    GENERATION_CONTRACT,
    CallIdentity,
    Client,
    Reply,
    checked_max_tokens,
    client_gone,
    event_stream,
    finished,
    model_request,
    program_identity,
    refusal,
    served_name,
    stop_strings,
)
from agentconsole.server.api.contract import contract
from agentconsole.server.api.deps import Live, LiveDep, PrincipalDep
from agentconsole.server.api.openai_format import (
    DONE,
    Completion,
    encode_json,
    tool_calls_json,
    usage_json,
    with_lost_reuse,
)
from agentconsole.server.api.schemas import ChatCompletionRequest, NamedToolChoice
from agentconsole.server.live.calls import LiveCall
from agentconsole.server.live.errors import NotFound
from agentconsole.server.live.intake import ChatCall


def chat_call(data: ChatCompletionRequest, request: Client, live: Live) -> ChatCall:
    """The service's view of a validated chat request (identity, limits, defaults)."""
    max_tokens = data.max_completion_tokens or data.max_tokens
    # OpenAI's newer name wins when both are sent; a refusal names the one that counted
    named = "max_completion_tokens" if data.max_completion_tokens else "max_tokens"
    stop = stop_strings(data.stop)
    choice = data.tool_choice
    tool_choice = choice.model_dump() if isinstance(choice, NamedToolChoice) else choice or "auto"
    return ChatCall(
        messages=[m.model_dump(exclude_none=True) for m in data.messages],
        max_tokens=checked_max_tokens(max_tokens, live.config.default_max_tokens, live, named),
        max_tokens_given=max_tokens is not None,  # a default may shrink to fit the context
        max_tokens_field=named,
        tools=[t.model_dump(exclude_none=True) for t in data.tools] if data.tools else None,
        tool_choice=tool_choice,
        reasoning_effort=data.reasoning_effort,
        temperature=1.0 if data.temperature is None else data.temperature,
        top_p=1.0 if data.top_p is None else data.top_p,
        stop=stop,
        frequency_penalty=data.frequency_penalty,
        presence_penalty=data.presence_penalty,
        logit_bias=data.token_bias,
        priority=data.priority,
        ignore_eos=data.ignore_eos,
        max_tool_calls=1 if data.parallel_tool_calls is False else None,
        **program_identity(data.agentconsole, request),
        **model_request(data.model, data.agentconsole, request),
    )


async def _stream(
    call: LiveCall, completion: Completion, include_usage: bool, held: ToolCallStream
) -> AsyncIterator[bytes]:
    done = False
    # the first delta names the role; its ``content`` is "" for an answer in text and null for
    # one that is only tool calls (OpenAI's): with tools declared it waits for the first text
    # the filter releases, or the end, to tell which
    opened = not call.tools
    try:
        if opened:
            yield _opening(completion, "")
        async for delta in call.deltas():
            text = held.feed(delta.text)
            if text:
                if not opened:
                    yield _opening(completion, "")
                    opened = True
                yield completion.chunk({"content": text})
        outcome = await call.outcome()
        refused = refusal(call, outcome)
        if refused is not None:
            yield completion.error(refused)
        else:
            rest, calls = held.finish()
            calls = calls[: call.max_tool_calls]  # as the accounting cut the DAG's nodes
            if rest or not (opened or calls):
                if not opened:
                    yield _opening(completion, "")
                    opened = True
                if rest:
                    yield completion.chunk({"content": rest})
            reason = outcome.finish_reason
            if calls:
                tool_calls = tool_calls_json(call.call_id, calls)
                if opened:
                    yield completion.chunk({"tool_calls": tool_calls})
                else:  # nothing but calls: they open the answer, with null content
                    yield _opening(completion, None, tool_calls)
                reason = "tool_calls"
            yield completion.chunk({}, reason, extra=completion.identity)
            if include_usage:
                yield completion.chunk({}, usage=usage_json(outcome.result, call.received))
        yield DONE
        done = True
    finally:
        if not done:
            call.abandon("disconnect")


def _opening(
    completion: Completion, content: str | None, tool_calls: list[dict[str, Any]] | None = None
) -> bytes:
    """The stream's first chunk: the role, the content (``""``, or null before tool calls),
    the calls when they are the whole answer, and the call's identity."""
    delta: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return completion.chunk(delta, extra=completion.identity)


async def chat_completion(
    client: Client, data: ChatCompletionRequest, live: Live, principal: Principal
) -> Reply | Stream:
    """Run one validated chat request as a call of its program: the JSON answer once the
    call ends, or (``stream: true``) the SSE stream of it."""
    chat = chat_call(data, client, live)
    call = await live.service.start_call(principal.tenant, chat, gone=client_gone(client))
    # the format of the model that runs the call (the runtime is up once a call started)
    chat_format = live.service.models.runtime_of(call.request.model).chat_format
    ident = CallIdentity.of(call, data.rid or data.request_id)
    usage = bool(data.stream and data.stream_options and data.stream_options.include_usage)
    completion = Completion(
        ident.request_id, served_name(call, live), ident.body, include_usage=usage
    )
    if data.stream:
        # the tools the prompt declared (intake's ``offered_tools``): what the stream parses
        body = _stream(call, completion, usage, chat_format.stream(call.tools))
        return event_stream(body, call, ident.headers)
    outcome = await finished(client, call, ident.headers)
    if isinstance(outcome, Reply):
        return outcome
    text, calls = call.answer or (outcome.text, [])  # cut to max_tool_calls where parsed
    tool_calls = tool_calls_json(call.call_id, calls) if calls else None
    reason = "tool_calls" if tool_calls else outcome.finish_reason
    body_json = completion.response(
        text, tool_calls, reason, usage_json(outcome.result, call.received)
    )
    headers = with_lost_reuse(ident.headers, call.lost_reuse_tokens)
    return Reply(encode_json(body_json), headers)


class ChatController(Controller):
    """OpenAI-compatible chat completions."""

    path = "/v1"
    tags = ("agents",)

    @post(
        "/chat/completions",
        status_code=200,
        summary="Create a chat completion",
        opt=GENERATION_CONTRACT,
    )
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[ChatCompletionRequest],
        live: LiveDep,
        principal: PrincipalDep,
    ) -> Response[Any]:
        """OpenAI chat completion; ``stream: true`` answers Server-Sent Events ending with
        ``data: [DONE]``. See docs/API.md for the agentconsole extras and errors."""
        answer = await chat_completion(request, data, live, principal)
        return answer.response() if isinstance(answer, Reply) else answer

    @get("/models", summary="The served models")
    async def models(self, live: LiveDep, principal: PrincipalDep) -> dict[str, Any]:
        """OpenAI model list: every served model (the default first), with its quality tier,
        price per million tokens, roles and whether it is loaded."""
        del principal  # any valid key may list the models
        return {"object": "list", "data": _model_objects(live)}

    @get("/models/{model_id:path}", summary="One served model", opt=contract(404))
    async def model(
        self, model_id: FromPath[Path], live: LiveDep, principal: PrincipalDep
    ) -> dict[str, Any]:
        """OpenAI model retrieval (``client.models.retrieve``): the served model of that id
        (which may contain ``/``), as the list shows it; 404 for any other id."""
        del principal
        wanted = model_id.as_posix().lstrip("/")  # Litestar's ``path`` type: a Path
        for model in _model_objects(live):
            if model["id"] == wanted:
                return model
        raise NotFound(f"model {wanted!r} is not served", field="model")


def _model_objects(live: Live) -> list[dict[str, Any]]:
    """Every served model as an OpenAI model object (the default first)."""
    created = int(live.started_at)
    return [
        {"object": "model", "created": created, "owned_by": "agentconsole", **model}
        for model in live.service.models.served_json()
    ]
