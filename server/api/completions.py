"""``POST /v1/completions`` (OpenAI's text completions, streaming or not).

A completion is a program call like a chat call: the same identity (the body's
``agentconsole`` object, the ``X-Program-Id`` / ``X-Node-Id`` / ``X-Parent-Ids`` headers, else
an inferred program), quotas, tickets, policy and accounting. Only the prompt differs: it is
used as is, tokenized by the runtime's chat format (``encode``; on SGLang with the model's
tokenizer and its special tokens, as SGLang tokenizes text). No tools are declared, so the
answer is plain text. Disconnects are handled as in :mod:`chat`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litestar import Controller, Request, Response, post
from litestar.params import JSONBody
from litestar.response import Stream

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
from agentconsole.server.api.deps import Live, LiveDep, PrincipalDep
from agentconsole.server.api.openai_format import (
    DONE,
    Completion,
    TextCompletion,
    encode_json,
    usage_json,
    with_lost_reuse,
)
from agentconsole.server.api.schemas import CompletionRequest
from agentconsole.server.live.calls import LiveCall
from agentconsole.server.live.intake import ChatCall

#: OpenAI's default for a completion that names no ``max_tokens``
DEFAULT_MAX_TOKENS = 16


def completion_call(data: CompletionRequest, request: Client, live: Live) -> ChatCall:
    """The service's view of a validated completion request; its one message (the prompt)
    only serves to find an inferred program by prefix."""
    stop = stop_strings(data.stop)
    prompt = data.text
    return ChatCall(
        messages=({"role": "prompt", "content": prompt},),
        max_tokens=checked_max_tokens(data.max_tokens, DEFAULT_MAX_TOKENS, live),
        max_tokens_given=data.max_tokens is not None,
        temperature=1.0 if data.temperature is None else data.temperature,
        top_p=1.0 if data.top_p is None else data.top_p,
        stop=stop,
        frequency_penalty=data.frequency_penalty,
        presence_penalty=data.presence_penalty,
        logit_bias=data.token_bias,
        priority=data.priority,
        ignore_eos=data.ignore_eos,
        prompt_text=prompt,
        **program_identity(data.agentconsole, request),
        **model_request(data.model, data.agentconsole, request),
    )


async def _stream(
    call: LiveCall, completion: TextCompletion, include_usage: bool
) -> AsyncIterator[bytes]:
    done = False
    try:
        first = True
        async for delta in call.deltas():
            if delta.text:
                extra = completion.identity if first else None
                yield completion.chunk(delta.text, extra=extra)
                first = False
        outcome = await call.outcome()
        refused = refusal(call, outcome)
        if refused is not None:
            yield Completion.error(refused)
        else:
            yield completion.chunk("", outcome.finish_reason, extra=completion.identity)
            if include_usage:
                yield completion.chunk("", usage=usage_json(outcome.result, call.received))
        yield DONE
        done = True
    finally:
        if not done:
            call.abandon("disconnect")


async def text_completion(
    client: Client, data: CompletionRequest, live: Live, principal: Principal
) -> Reply | Stream:
    """Run one validated completion request as a call of its program: the JSON answer once
    the call ends, or (``stream: true``) the SSE stream of it."""
    wanted = completion_call(data, client, live)
    call = await live.service.start_call(principal.tenant, wanted, gone=client_gone(client))
    ident = CallIdentity.of(call, data.rid or data.request_id)
    usage = bool(data.stream and data.stream_options and data.stream_options.include_usage)
    completion = TextCompletion(
        ident.request_id, served_name(call, live), ident.body, include_usage=usage
    )
    if data.stream:
        return event_stream(_stream(call, completion, usage), call, ident.headers)
    outcome = await finished(client, call, ident.headers)
    if isinstance(outcome, Reply):
        return outcome
    used = usage_json(outcome.result, call.received)
    body = completion.response(outcome.text, outcome.finish_reason, used)
    headers = with_lost_reuse(ident.headers, call.lost_reuse_tokens)
    return Reply(encode_json(body), headers)


class CompletionsController(Controller):
    """OpenAI-compatible text completions."""

    path = "/v1"
    tags = ("agents",)

    @post(
        "/completions",
        status_code=200,
        summary="Create a text completion",
        opt=GENERATION_CONTRACT,
    )
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[CompletionRequest],
        live: LiveDep,
        principal: PrincipalDep,
    ) -> Response[Any]:
        """OpenAI text completion of ``prompt`` (one string); ``stream: true`` answers
        Server-Sent Events ending with ``data: [DONE]``. See docs/API.md."""
        answer = await text_completion(request, data, live, principal)
        return answer.response() if isinstance(answer, Reply) else answer
