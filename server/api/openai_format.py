"""OpenAI wire shapes of a chat completion: the response object, stream chunks, usage.

``usage.prompt_tokens_details.cached_tokens`` is what the runtime reports for the call; the
runtime's cache is namespaced by the authenticated tenant, so it only ever counts hits on the
caller's own tenant's prefixes.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import msgspec

from agentconsole.scheduler.runtime import GenerationResult
from agentconsole.server.live.prompt import ToolCall

JSON = dict[str, Any]
_encode = msgspec.json.Encoder().encode


def tool_calls_json(call_id: str, calls: list[ToolCall]) -> list[JSON]:
    """``tool_calls`` entries with stable ids derived from the call id."""
    out = []
    for index, call in enumerate(calls):
        digest = hashlib.blake2b(f"{call_id}#{index}".encode(), digest_size=12).hexdigest()
        out.append(
            {
                "index": index,
                "id": f"call_{digest}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
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
    """Builds the response objects of one call (its ids, model and creation time)."""

    def __init__(self, request_id: str, model: str, identity: JSON) -> None:
        self.id = f"chatcmpl-{request_id}"
        self.model = model
        self.created = int(time.time())
        self.identity = identity

    def response(
        self,
        text: str,
        tool_calls: list[JSON] | None,
        finish_reason: str,
        usage: JSON,
        error: JSON | None = None,
    ) -> JSON:
        """The non-streaming ``chat.completion``."""
        message: JSON = {"role": "assistant", "content": None if tool_calls else text}
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
        """One SSE ``data:`` frame of a ``chat.completion.chunk``."""
        body: JSON = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": []
            if usage is not None
            else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }
        if usage is not None:
            body["usage"] = usage
        if extra is not None:
            body["agentconsole"] = extra
        return b"data: " + _encode(body) + b"\n\n"

    @staticmethod
    def error(kind: str, message: str) -> bytes:
        """An SSE frame carrying an error (OpenAI clients raise it as an APIError)."""
        return b"data: " + _encode({"error": {"type": kind, "message": message}}) + b"\n\n"


DONE = b"data: [DONE]\n\n"
