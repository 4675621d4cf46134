"""A program call as a ``/v1/completions`` request through sglang-router, and its stream read
back as the SGLang chunks the adapter's stream and telemetry already understand.

The router rebuilds request bodies from typed fields: on ``/v1/completions`` it keeps ``rid``,
``priority``, ``cache_salt`` and ``custom_params`` (on ``/generate`` and the chat route it
drops some), and its prompt field takes text only (a list of token ids is refused with 400), so
the body carries the rendered prompt text. Sampling fields are those of the in-process adapter
(``wire.sampling_params``: the ticket in ``custom_params``), as top-level fields.

SGLang streams one choice chunk per detokenized step (its ``text`` a delta) and, with
``stream_options.include_usage``, a last chunk with the usage (``cached_tokens`` needs
``--enable-cache-report`` on the worker). :class:`ChunkReader` turns each into the cumulative
``{"text", "meta_info"}`` chunk of SGLang's tokenizer manager: ``completion_tokens`` counts
choice chunks until the usage gives the exact numbers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.server.runtime.sglang import wire

logger = logging.getLogger("agentconsole.sglang.cluster")
#: the header sglang-router's ``manual`` policy maps to a worker (one program, one worker)
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
COMPLETIONS_PATH = "/v1/completions"


def completion_body(
    request: GenerationRequest,
    *,
    model: str,
    clock_offset: float,
    kind: wire.CallKind = wire.CallKind.CALL,
) -> dict[str, Any]:
    """The JSON body of ``request``'s streamed ``/v1/completions`` call."""
    body = wire.sampling_params(request, clock_offset=clock_offset, kind=kind)
    body["max_tokens"] = body.pop("max_new_tokens")
    body.update(
        model=model,
        prompt=request.prompt,
        rid=request.ticket.call_id,
        priority=wire.static_priority(request.ticket),
        cache_salt=wire.request_salt(request),
        stream=True,
        stream_options={"include_usage": True},
    )
    return body


def routing_headers(request: GenerationRequest) -> dict[str, str]:
    """Every call of a program carries the program id as the router's routing key."""
    return {ROUTING_KEY_HEADER: request.ticket.program_id}


class ChunkReader:
    """Accumulates one call's OpenAI stream into SGLang-style chunks (module docstring)."""

    def __init__(self) -> None:
        self.text = ""
        self.meta: dict[str, Any] = {"completion_tokens": 0}
        self.started = time.time()

    def read(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """The SGLang chunk for one SSE event (None: nothing in it)."""
        choices = event.get("choices") or []
        usage = event.get("usage")
        if not choices and not isinstance(usage, dict):
            return None
        meta = dict(self.meta)
        for choice in choices:
            self.text += str(choice.get("text") or "")
            meta["completion_tokens"] = int(meta["completion_tokens"]) + 1
            if choice.get("finish_reason"):
                meta["finish_reason"] = {"type": str(choice["finish_reason"])}
        if isinstance(usage, dict):
            meta["prompt_tokens"] = int(usage.get("prompt_tokens") or 0)
            meta["completion_tokens"] = int(usage.get("completion_tokens") or 0)
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                meta["cached_tokens"] = int(details.get("cached_tokens") or 0)
        self.meta = meta
        return {"text": self.text, "meta_info": meta}


async def sse_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of an event stream, ended only where SSE ends one (``\\n``, ``\\r\\n``,
    ``\\r``). Not ``str.splitlines``: SGLang's JSON keeps U+2028 and U+0085 raw inside
    generated text, and a split there would lose the frame."""
    pending = b""
    async for chunk in chunks:
        data = pending + chunk
        # a CR that ends a chunk may be the first half of a CRLF: it waits for the next
        held = b"\r" if data.endswith(b"\r") else b""
        data = data[: len(data) - len(held)].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *complete, rest = data.split(b"\n")
        pending = rest + held
        for line in complete:
            yield line.decode(errors="replace")
    if pending.rstrip(b"\r"):
        yield pending.rstrip(b"\r").decode(errors="replace")


async def sse_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a ``data:`` event stream (its raw bytes), up to ``[DONE]``."""
    async for line in sse_lines(chunks):
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            logger.warning("an SSE frame from SGLang did not parse: %.200s", data)
            continue
        if isinstance(event, dict):
            yield event
