"""``/v1/completions`` and ``tool_choice`` on the simulated runtime, with the official ``openai``
client: a completion is a program call (identity, quotas, usage), bad requests are 400, a
response names the served model, and ``tool_choice`` required / named / none is honoured."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from agentconsole.server.runtime.sim.live_text import count_tokens
from tests.server.api.harness import LiveServer, chat_body

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                "required": ["zone"],
            },
        },
    },
]


def _client(server: LiveServer, key: str = "sk-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_completion_is_a_program_call_and_names_the_served_model(server: LiveServer) -> None:
    client = _client(server)
    done = client.completions.create(
        model="not-the-served-name",
        prompt="Once upon a time",
        max_tokens=12,
        extra_body={"agentconsole": {"program_id": "cmpl-1", "node_id": "first"}},
    )
    assert done.object == "text_completion"
    assert done.model == server.live.config.model_name != "not-the-served-name"
    choice = done.choices[0]
    assert choice.text
    assert choice.finish_reason in ("stop", "length")
    assert done.usage is not None
    # the prompt as is, in simulated tokens (4 characters a token, rounded up)
    assert done.usage.prompt_tokens == 4
    assert 0 < done.usage.completion_tokens <= 12
    with server.client() as c:
        program = c.get("/v1/programs/cmpl-1").json()
    assert [n["node_id"] for n in program["nodes"]] == ["first"]
    assert program["nodes"][0]["prompt_tokens"] == 4


def test_streamed_completion_with_usage_and_header_identity(server: LiveServer) -> None:
    client = _client(server)
    chunks = list(
        client.completions.create(
            model="m",
            prompt="Tell me a story",
            max_tokens=20,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"X-Program-Id": "cmpl-2"},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text
    assert all(c.object == "text_completion" for c in chunks)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] in ("stop", "length")
    assert not any(reasons[:-1])
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == count_tokens(text)  # the simulated tokenizer's count
    with server.client() as c:
        assert c.get("/v1/programs/cmpl-2").json()["nodes_done"] == 1


def test_completion_quota_is_429(server: LiveServer) -> None:
    with server.client() as c:
        made = c.post("/v1/programs", json={"program_id": "cmpl-q", "quotas": {"tokens": 30}})
        assert made.status_code == 201
    client = _client(server)
    body = {"agentconsole": {"program_id": "cmpl-q"}, "ignore_eos": True}
    client.completions.create(model="m", prompt="x" * 8, max_tokens=20, extra_body=body)
    with pytest.raises(openai.RateLimitError):  # stopped when it crosses 30 tokens
        client.completions.create(model="m", prompt="x" * 8, max_tokens=20, extra_body=body)
    with pytest.raises(openai.RateLimitError):  # the program stays stopped
        client.completions.create(model="m", prompt="x", max_tokens=1, extra_body=body)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"echo": True}, "echo"),
        ({"n": 2}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"logprobs": 2}, "logprobs"),
        ({"suffix": "end"}, "suffix"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"max_tokens": 10**6}, "max_tokens"),
    ],
)
def test_unsupported_completion_requests_are_400(
    server: LiveServer, extra: dict[str, Any], field: str
) -> None:
    body = {"model": "m", "prompt": "hi", **extra}
    with server.client() as c:
        response = c.post("/v1/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert field in (error.get("field") or "") + error["message"]


def _called(server: LiveServer, messages: list[Any], choice: Any) -> list[tuple[str, Any]]:
    done = _client(server).chat.completions.create(
        model="m", messages=messages, tools=TOOLS, tool_choice=choice, max_tokens=200
    )
    assert done.model == server.live.config.model_name
    calls = done.choices[0].message.tool_calls or []
    if calls:
        assert done.choices[0].finish_reason == "tool_calls"
    return [(c.function.name, json.loads(c.function.arguments)) for c in calls]  # type: ignore[union-attr]


def test_tool_choice_required_named_and_none_on_the_simulator(server: LiveServer) -> None:
    asked: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    answered: list[Any] = [
        *asked,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    assert _called(server, asked, "auto") == [("get_weather", {"city": "sim"})]
    assert _called(server, answered, "auto") == []  # a tool result is in: plain answer
    assert _called(server, answered, "required") == [("get_weather", {"city": "sim"})]
    named = {"type": "function", "function": {"name": "get_time"}}
    assert _called(server, answered, named) == [("get_time", {"zone": "UTC"})]
    assert _called(server, asked, "none") == []


def test_tool_choice_required_without_tools_is_refused(server: LiveServer) -> None:
    body = chat_body("Weather in Paris?", tool_choice="required")
    with server.client() as c:
        refused = c.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400
    assert refused.json()["error"]["field"].startswith("tool_choice")
