"""Prompts as the served model reads them: a call's prompt comes from the runtime's format.

Every runtime exposes a ``ChatFormat`` (``runtime.chat_format``): SGLang the model's own chat
template and tool-call parser (ChatML when the tokenizer has none), the simulator ChatML with
its own token count. :func:`render_prompt` (a chat call) and :func:`encode_prompt` (a raw
``/v1/completions`` prompt) turn a request into a :class:`Prompt` with that format, so its size
is the model's token count and, where the runtime has a tokenizer, its ids are sent to the
engine as they are. A template that refuses the messages is the client's error (422).

The built-in ChatML pieces live in :mod:`chatml`; they are re-exported here for existing
callers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentconsole.scheduler.runtime import ChatFormat, Prompt
from agentconsole.server.live.chatml import (
    CALL_CLOSE,
    CALL_OPEN,
    ToolCall,
    ToolCallFilter,
    message_text,
    offered_tools,
    parse_tool_calls,
    render_chat,
)
from agentconsole.server.live.errors import InvalidRequest

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "ToolCall",
    "ToolCallFilter",
    "encode_prompt",
    "message_text",
    "offered_tools",
    "parse_tool_calls",
    "render_chat",
    "render_prompt",
]


def render_prompt(
    chat_format: ChatFormat,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: object = "auto",
    reasoning_effort: str | None = None,
) -> Prompt:
    """The prompt of a chat call in ``chat_format`` (``InvalidRequest`` if the model's
    template refuses the messages, e.g. roles that do not alternate)."""
    try:
        return chat_format.render(messages, tools, tool_choice, reasoning_effort=reasoning_effort)
    except ValueError as error:
        raise InvalidRequest(
            f"the model's chat template refused the messages: {error}", field="messages"
        ) from error


def encode_prompt(chat_format: ChatFormat, text: str) -> Prompt:
    """A raw prompt (``/v1/completions``) as the model of ``chat_format`` tokenizes it."""
    return chat_format.encode(text)
