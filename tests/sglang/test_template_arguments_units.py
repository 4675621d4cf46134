"""A tool call's ``arguments`` in the served model's own chat template, without an engine or a
real tokenizer: JSON is decoded for the template, text that is not JSON passes as sent, and
JSON nested deeper than a request body may be is refused (400 ``invalid_json`` naming the
field), as the built-in ChatML refuses it, never a ``RecursionError`` (a 500)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agentconsole.server.live.chatml import (
    MAX_ARGUMENTS_DEPTH,
    ArgumentsTooDeep,
    parse_tool_calls,
    render_chat,
)
from agentconsole.server.live.prompt import render_prompt
from agentconsole.server.runtime.sglang.chat_template import TemplateFormat

FIELD = "messages.1.tool_calls.0.function.arguments"


class RecordingTokenizer:
    """What ``TemplateFormat`` calls of a tokenizer: the template (recording the chat it was
    given) and the ids (one a character)."""

    def __init__(self) -> None:
        self.chats: list[list[dict[str, Any]]] = []

    def apply_chat_template(self, chat: list[dict[str, Any]], **options: Any) -> str:
        self.chats.append(chat)
        return repr(chat)[:200]

    def __call__(self, text: str, add_special_tokens: bool) -> Mapping[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}


def _messages(arguments: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [100_000, 500, MAX_ARGUMENTS_DEPTH + 1])
def test_the_template_path_refuses_arguments_nested_too_deep(depth: int) -> None:
    fmt = TemplateFormat(RecordingTokenizer(), "hermes")
    with pytest.raises(ArgumentsTooDeep) as refused:
        fmt.render(_messages(_nested(depth)), None, "auto")
    assert refused.value.status == 400
    assert refused.value.type == "invalid_json"
    assert refused.value.field == FIELD
    # what the intake calls: the refusal is not re-wrapped as the template's 422
    with pytest.raises(ArgumentsTooDeep):
        render_prompt(fmt, _messages(_nested(depth)), None, "auto")


@pytest.mark.parametrize(
    ("arguments", "seen"),
    [
        ('{"city": "Paris"}', {"city": "Paris"}),
        ("not json {", "not json {"),
        (_nested(MAX_ARGUMENTS_DEPTH), None),  # decoded: checked below
    ],
    ids=["an-object", "not-json", "at-the-bound"],
)
def test_the_template_gets_json_decoded_and_other_text_as_sent(arguments: str, seen: Any) -> None:
    tokenizer = RecordingTokenizer()
    TemplateFormat(tokenizer, "hermes").render(_messages(arguments), None, "auto")
    (chat,) = tokenizer.chats
    given = chat[1]["tool_calls"][0]["function"]["arguments"]
    if seen is None:
        assert isinstance(given, list)
    else:
        assert given == seen


def test_the_built_in_chatml_refuses_the_same() -> None:
    with pytest.raises(ArgumentsTooDeep) as refused:
        render_chat(_messages(_nested(100_000)))
    assert refused.value.field == FIELD
    assert "<tool_call>" in render_chat(_messages(_nested(MAX_ARGUMENTS_DEPTH)))


@pytest.mark.parametrize("depth", [100_000, 500])
def test_a_model_answer_nested_too_deep_is_plain_text(depth: int) -> None:
    # the model's own text (a tenant can ask for it): read as no tool call, never a crash
    answer = '<tool_call>{"name": "f", "arguments": ' + _nested(depth) + "}</tool_call>"
    assert parse_tool_calls(answer) is None
    within = '<tool_call>{"name": "f", "arguments": ' + _nested(3) + "}</tool_call>"
    calls = parse_tool_calls(within)
    assert calls is not None
    assert calls[0].arguments == "[[[]]]"
