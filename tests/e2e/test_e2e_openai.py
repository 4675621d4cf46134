"""The official ``openai`` client against ``agentconsole serve --runtime sim``."""

from __future__ import annotations

import json
import re

import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)
from openai.types.chat.chat_completion_message_function_tool_call_param import Function

from tests.e2e.conftest import ServeProcess

pytestmark = pytest.mark.e2e

TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]


def _client(served: ServeProcess, key: str = "sk-dev") -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0)


def test_plain_and_streamed_completions(sim_serve: ServeProcess) -> None:
    client = _client(sim_serve)
    assert client.models.list().data[0].id
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something."}]
    extra = {"agentconsole": {"program_id": "oa-1"}}
    done = client.chat.completions.create(
        model="sim",
        messages=messages,
        max_tokens=20,
        extra_body=extra,
    )
    assert done.choices[0].message.content
    assert done.choices[0].finish_reason in ("stop", "length")
    assert done.usage is not None
    assert done.usage.completion_tokens > 0
    chunks = list(
        client.chat.completions.create(
            model="sim",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=extra,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert (usage.prompt_tokens_details.cached_tokens or 0) >= 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_tool_call_round_trip(sim_serve: ServeProcess) -> None:
    client = _client(sim_serve)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
    headers = {"X-Program-Id": "oa-tools"}
    first = client.chat.completions.create(
        model="sim",
        messages=messages,
        tools=TOOLS,
        extra_headers=headers,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls
    call = calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "sim"}
    function: Function = {"name": call.function.name, "arguments": call.function.arguments}
    messages += [
        {
            "role": "assistant",
            "tool_calls": [{"id": call.id, "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.create(
        model="sim",
        messages=messages,
        tools=TOOLS,
        extra_headers=headers,
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content
    streamed = client.chat.completions.create(
        model="sim",
        messages=messages[:1],
        tools=TOOLS,
        stream=True,
    )
    deltas = [c.choices[0].delta for c in streamed if c.choices]
    tool_deltas = [t for d in deltas for t in d.tool_calls or []]
    assert tool_deltas
    assert tool_deltas[0].function is not None
    assert tool_deltas[0].function.name == "get_weather"
    assert not "".join(d.content or "" for d in deltas)  # no raw <tool_call> markup leaks


def test_errors_surface_as_openai_exceptions(sim_serve: ServeProcess) -> None:
    with pytest.raises(openai.AuthenticationError):
        _client(sim_serve, "sk-wrong").models.list()
    # an invalid request is OpenAI's 400, naming the field as ``param``
    with pytest.raises(openai.BadRequestError) as invalid:
        _client(sim_serve).chat.completions.create(model="sim", messages=[], n=1)
    assert (invalid.value.param, invalid.value.type) == ("messages", "invalid_request_error")


def test_a_prompt_over_the_context_is_a_bad_request_agents_can_trim_on(
    sim_serve: ServeProcess,
) -> None:
    """What agent frameworks catch to trim their history: ``BadRequestError`` with ``code``
    ``context_length_exceeded``, its message naming both lengths (the simulated llama-3.1-8b
    serves 131,072 tokens; the sim counts 4 characters a token), from chat and text
    completions alike."""
    client = _client(sim_serve)
    long = "abcd" * 131_100
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": long}], max_tokens=8
        )
    with pytest.raises(openai.BadRequestError) as text:
        client.completions.create(model="sim", prompt=long, max_tokens=8)
    for refused, param in ((chat.value, "messages"), (text.value, "prompt")):
        assert (refused.status_code, refused.code, refused.param) == (
            400,
            "context_length_exceeded",
            param,
        )
        assert isinstance(refused.body, dict)
        message = str(refused.body["message"])  # the client's ``message`` is the whole body
        assert message.startswith("This model's maximum context length is 131072 tokens")
        prompt = re.search(r"(\d+) prompt tokens \+ max_tokens 8", message)
        assert prompt is not None, message
        assert int(prompt[1]) >= 131_100
