"""The built-in chat format: ChatML with Hermes-style tools (:mod:`prompt`), as a ``ChatFormat``.

A runtime whose model has no chat template of its own uses it: the simulated runtime (with its
own token count, four characters a token) and SGLang for a tokenizer without a template (with
the tokenizer's token ids). The service reads a runtime's format as ``Runtime.chat_format``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentconsole.scheduler.runtime import Prompt, ToolCallTuple
from agentconsole.server.live.chatml import ToolCallFilter, parse_tool_calls, render_chat

#: (text, add the tokenizer's special tokens?) -> the prompt in the model's tokens
Tokenize = Callable[[str, bool], Prompt]

CHARS_PER_TOKEN = 4  # the size estimate of a runtime that gives no token count


def estimated(text: str, special: bool = False) -> Prompt:
    """``text`` sized at four characters a token (no token ids)."""
    del special
    return Prompt(text, max(-(-len(text) // CHARS_PER_TOKEN), 1))


class ChatMLFormat:
    """ChatML prompts, Hermes ``<tool_call>`` blocks; sizes and ids from ``tokenize``."""

    def __init__(self, tokenize: Tokenize = estimated, *, name: str = "chatml") -> None:
        self._tokenize = tokenize
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: object,
        *,
        reasoning_effort: str | None = None,
    ) -> Prompt:
        """The ChatML prompt (no special tokens added: the markers are in the text). ChatML
        has no reasoning switch: ``reasoning_effort`` changes nothing."""
        del reasoning_effort
        return self._tokenize(render_chat(messages, tools, tool_choice), False)

    def encode(self, text: str) -> Prompt:
        return self._tokenize(text, True)

    def parse(
        self, text: str, tools: Sequence[Mapping[str, Any]]
    ) -> tuple[str, list[ToolCallTuple]]:
        """Tool calls only when the answer is nothing but ``<tool_call>`` blocks (as before:
        anything else is plain text)."""
        del tools
        calls = parse_tool_calls(text)
        if calls is None:
            return text, []
        return "", [(c.name, c.arguments) for c in calls]

    def stream(self, tools: Sequence[Mapping[str, Any]]) -> _ChatMLStream:
        return _ChatMLStream(bool(tools))


class _ChatMLStream:
    """:class:`ToolCallFilter` behind the ``ToolCallStream`` protocol."""

    def __init__(self, enabled: bool) -> None:
        self._filter = ToolCallFilter(enabled)

    def feed(self, text: str) -> str:
        return self._filter.feed(text)

    def finish(self) -> tuple[str, list[ToolCallTuple]]:
        rest, calls = self._filter.finish()
        return rest, [(c.name, c.arguments) for c in calls or ()]
