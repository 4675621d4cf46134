"""What the request schemas refuse because the server cannot honour it, without a server: each
unsupported field is declared one way (``schemas.Unsupported``), refused saying why and
published as the values it accepts; a content part that is not text is refused at the edge in
the prompt formats' own words (``chatml.message_text``), naming the content."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agentconsole.server.api.schemas import ChatCompletionRequest, CompletionRequest
from agentconsole.server.live.chatml import message_text
from agentconsole.server.live.errors import InvalidRequest

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION: dict[str, Any] = {"model": "m", "prompt": "hi"}


def _errors(model: type[BaseModel], body: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    """Where and why ``model`` refuses ``body`` (sent as JSON); empty if it accepts it."""
    try:
        model.model_validate_json(json.dumps(body))
    except ValidationError as refused:
        return [(tuple(e["loc"]), e["msg"]) for e in refused.errors()]
    return []


@pytest.mark.parametrize(
    ("model", "base", "field", "accepted", "refused", "reason"),
    [
        (ChatCompletionRequest, CHAT, "logprobs", [False, None], [True, 0], "log probabilities"),
        (ChatCompletionRequest, CHAT, "top_logprobs", [None], [0, 2], "log probabilities"),
        (CompletionRequest, COMPLETION, "echo", [False, None], [True, 0], "echo the prompt"),
        (CompletionRequest, COMPLETION, "logprobs", [None], [0, 2], "log probabilities"),
        (CompletionRequest, COMPLETION, "suffix", [None], ["", "end"], "suffix"),
        (ChatCompletionRequest, CHAT, "functions", [None], [[{"name": "f"}], []], "'tools'"),
        (
            ChatCompletionRequest,
            CHAT,
            "function_call",
            [None],
            ["auto", {"name": "f"}],
            "'tool_choice'",
        ),
        (ChatCompletionRequest, CHAT, "audio", [None], [{"voice": "alloy"}], "text only"),
    ],
)
def test_an_unsupported_field_is_refused_saying_why_and_published_as_what_it_accepts(
    model: type[BaseModel],
    base: dict[str, Any],
    field: str,
    accepted: list[Any],
    refused: list[Any],
    reason: str,
) -> None:
    for value in accepted:
        assert _errors(model, {**base, field: value}) == []
    for value in refused:
        [(where, message)] = _errors(model, {**base, field: value})
        assert where == (field,)
        assert message.startswith("is not supported: ")
        assert reason in message
    published = model.model_json_schema()["properties"][field]
    allowed = [published["const"]] if "const" in published else published["enum"]
    assert allowed == accepted


@pytest.mark.parametrize("kind", ["image_url", "input_audio", "it's", 5, None])
def test_a_part_that_is_not_text_is_refused_in_the_prompt_formats_own_words(kind: Any) -> None:
    content = [{"type": "text", "text": "What is this?"}, {"type": kind}]
    with pytest.raises(InvalidRequest) as said:
        message_text(content)
    body = {**CHAT, "messages": [{"role": "user", "content": content}]}
    assert _errors(ChatCompletionRequest, body) == [(("messages", 0, "content"), str(said.value))]


def test_text_parts_and_plain_text_still_pass() -> None:
    parts = [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]
    for content in (parts, "one two"):
        body = {**CHAT, "messages": [{"role": "user", "content": content}]}
        assert _errors(ChatCompletionRequest, body) == []


@pytest.mark.parametrize("modalities", [["audio"], ["text", "audio"], ["image"]])
def test_modalities_other_than_text_are_refused_naming_the_modality(modalities: list[str]) -> None:
    [(where, message)] = _errors(ChatCompletionRequest, {**CHAT, "modalities": modalities})
    assert where == ("modalities",)
    assert message.startswith(f"modality '{modalities[-1]}' is not supported: ")
    for fine in (["text"], None):
        assert _errors(ChatCompletionRequest, {**CHAT, "modalities": fine}) == []
    published = ChatCompletionRequest.model_json_schema()["properties"]["modalities"]
    assert {"items": {"const": "text", "type": "string"}, "maxItems": 1, "type": "array"} in (
        published["anyOf"]
    )


def test_too_many_messages_are_refused_before_any_is_validated() -> None:
    """pydantic checks a list's length after validating every item: 120,000 tiny messages (a
    4 MB body) held the event loop 0.15 s per request. The count is checked first: the one
    error is the length's, none of the (invalid) items'."""
    body = {"model": "m", "messages": [{"bogus": 1}] * 10_001}
    with pytest.raises(ValidationError) as refused:
        ChatCompletionRequest.model_validate(body, strict=True)
    (error,) = refused.value.errors()
    assert (error["type"], error["loc"]) == ("too_long", ("messages",))
    assert "at most 10000 items" in error["msg"]
