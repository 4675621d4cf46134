"""OpenAI wire shapes of a chat completion and a text completion: responses, stream chunks,
usage. ``model`` is always the served model's name (whatever the request said).

``usage.prompt_tokens_details.cached_tokens`` is what the runtime reports for the call; the
runtime's cache is namespaced by the authenticated tenant, so it only ever counts hits on the
caller's own tenant's prefixes.

Every answer and chunk carries OpenAI's keys, null where the server has nothing to say:
``system_fingerprint`` (null: no backend fingerprint, ``seed`` is not honoured) and, on a stream
whose client asked ``stream_options.include_usage``, ``"usage": null`` on every chunk before the
last (the usage chunk), as OpenAI sends them. Both lanes (Litestar's controllers and the
express lane) stream through these builders.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from agentconsole.scheduler.runtime import GenerationResult, ToolCallTuple
from agentconsole.server.api.errors import openai_refusal_body
from agentconsole.server.live.toolcalls import tool_call_id

JSON = dict[str, Any]
#: the tokens a non-streamed call prefilled again because its prompt inserted new tokens
#: mid-prompt (what appending them instead would have saved; server/live/insertions.py)
LOST_REUSE_HEADER = "X-Agentconsole-Lost-Reuse-Tokens"


def with_lost_reuse(headers: dict[str, str], lost_reuse_tokens: int | None) -> dict[str, str]:
    """``headers`` plus :data:`LOST_REUSE_HEADER` when the call inserted mid-prompt (a
    streamed response's headers leave before the call ends, so only non-streamed ones)."""
    if lost_reuse_tokens is None:
        return headers
    return {**headers, LOST_REUSE_HEADER: str(lost_reuse_tokens)}


#: OpenAI's ``system_fingerprint`` (the backend configuration a ``seed`` reproduces with):
#: null, as OpenAI allows, since the server honours no ``seed``; the same in every answer
SYSTEM_FINGERPRINT: str | None = None

#: JSON bytes of a value (the bodies both generation routes send)
encode_json = msgspec.json.Encoder().encode

#: the line ends JSON leaves unescaped inside strings (U+0085, U+2028, U+2029, as UTF-8)
#: with their escapes: ``str.splitlines`` (so httpx's ``iter_lines`` and many SSE clients)
#: ends a line at each, which would cut a frame whose generated text holds one in two
_LINE_ENDS_JSON_KEEPS = (
    (b"\xc2\x85", b"\\u0085"),
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
)


def sse_data(value: Any) -> bytes:
    """One SSE ``data:`` frame of ``value`` as JSON, on one line for every line splitter."""
    data = encode_json(value)
    for raw, escaped in _LINE_ENDS_JSON_KEEPS:
        if raw in data:
            data = data.replace(raw, escaped)
    return b"data: " + data + b"\n\n"


def tool_calls_json(call_id: str, calls: Sequence[ToolCallTuple]) -> list[JSON]:
    """``tool_calls`` entries (from ``(name, arguments JSON)``) with stable ids derived from
    the call id."""
    out = []
    for index, (name, arguments) in enumerate(calls):
        out.append(
            {
                "index": index,
                "id": tool_call_id(call_id, index),
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
    return out


def usage_json(result: GenerationResult | None, received: int) -> JSON:
    prompt = result.prompt_tokens if result else 0
    output = result.output_tokens if result else received
    cached = result.cached_tokens if result else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


class Completion:
    """Builds the response objects of one call (its ids, model and creation time);
    ``include_usage``: the stream ends with a usage chunk, so every chunk before it says
    ``"usage": null``."""

    def __init__(
        self, request_id: str, model: str, identity: JSON, *, include_usage: bool = False
    ) -> None:
        self.id = f"chatcmpl-{request_id}"
        self.model = model
        self.created = int(time.time())
        self.identity = identity
        self.include_usage = include_usage

    def response(
        self,
        text: str,
        tool_calls: list[JSON] | None,
        finish_reason: str,
        usage: JSON,
        error: JSON | None = None,
    ) -> JSON:
        """The non-streaming ``chat.completion`` (with tool calls, ``content`` is the text the
        model wrote beside them, or null)."""
        message: JSON = {"role": "assistant", "content": (text or None) if tool_calls else text}
        if tool_calls:
            message["tool_calls"] = [
                {k: v for k, v in call.items() if k != "index"} for call in tool_calls
            ]
        identity = dict(self.identity, error=error) if error else self.identity
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
            ],
            "usage": usage,
            "agentconsole": identity,
        }

    def chunk(
        self,
        delta: JSON,
        finish_reason: str | None = None,
        *,
        usage: JSON | None = None,
        extra: JSON | None = None,
    ) -> bytes:
        """One SSE ``data:`` frame of a ``chat.completion.chunk`` (with ``usage``: the last,
        with no choices)."""
        body: JSON = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": []
            if usage is not None
            else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }
        if usage is not None or self.include_usage:
            body["usage"] = usage
        if extra is not None:
            body["agentconsole"] = extra
        return sse_data(body)

    @staticmethod
    def error(refused: Exception) -> bytes:
        """An SSE frame carrying the refusal (OpenAI clients raise it as an APIError, its
        ``code`` and ``param`` read from it), in the error shape of this route's other
        answers."""
        return sse_data(openai_refusal_body(refused))


class TextCompletion:
    """Builds the ``text_completion`` objects of one ``/v1/completions`` call
    (``include_usage`` as :class:`Completion`'s)."""

    def __init__(
        self, request_id: str, model: str, identity: JSON, *, include_usage: bool = False
    ) -> None:
        self.id = f"cmpl-{request_id}"
        self.model = model
        self.created = int(time.time())
        self.identity = identity
        self.include_usage = include_usage

    def _body(self, choices: list[JSON]) -> JSON:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
        }

    @staticmethod
    def _choice(text: str, finish_reason: str | None) -> JSON:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}

    def response(self, text: str, finish_reason: str, usage: JSON) -> JSON:
        """The non-streaming ``text_completion``."""
        body = self._body([self._choice(text, finish_reason)])
        body["usage"] = usage
        body["agentconsole"] = self.identity
        return body

    def chunk(
        self,
        text: str,
        finish_reason: str | None = None,
        *,
        usage: JSON | None = None,
        extra: JSON | None = None,
    ) -> bytes:
        """One SSE ``data:`` frame (with ``usage``: the last, with no choices)."""
        body = self._body([] if usage is not None else [self._choice(text, finish_reason)])
        if usage is not None or self.include_usage:
            body["usage"] = usage
        if extra is not None:
            body["agentconsole"] = extra
        return sse_data(body)


DONE = b"data: [DONE]\n\n"
