"""OpenAI request parameters the official ``openai`` client and agent SDKs send, honoured over
real HTTP: ``top_p: 0`` (accepted, greedy on the engine), message ``name`` fields (rendered
into the prompt, so two named speakers of one role stay apart) and ``parallel_tool_calls:
false`` (only the answer's first tool call is returned, and only it becomes a tool node)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.live.chatml import render_chat
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sim import live_text
from tests.server.api.harness import LiveServer, chat_body, wait_until

CHAT = "/v1/chat/completions"


def _client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-a", max_retries=0)


@pytest.fixture
def prompts(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The prompts the runtime is sent while the test runs (the server runs in-process)."""
    runtime = server.live.service.runtime
    seen: list[str] = []
    submit = runtime.submit

    def recording(request: GenerationRequest) -> Any:
        seen.append(request.prompt)
        return submit(request)

    monkeypatch.setattr(runtime, "submit", recording)
    return seen


# -- 1. top_p: 0 ----------------------------------------------------------------------------------
def test_top_p_zero_is_accepted_by_chat_and_completions(server: LiveServer) -> None:
    client = _client(server)
    chat = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], top_p=0, max_tokens=4
    )
    assert chat.choices[0].message.content
    text = client.completions.create(model="m", prompt="hi", top_p=0, max_tokens=4)
    assert text.choices[0].text
    with server.client() as c:  # the bounds stay: [0, 1]
        for bad in (-0.1, 1.5):
            refused = c.post(CHAT, json=chat_body(top_p=bad, max_tokens=4))
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["param"] == "top_p"


def _sglang_params(top_p: float, temperature: float) -> Any:
    """What SGLang makes of the call's ``sampling_params`` (raises where it refuses them)."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    request = GenerationRequest(
        CallTicket(call_id="c", program_id="p", node_id="n", tenant="t", arrival=0.0),
        "hi",
        4,
        temperature=temperature,
        top_p=top_p,
    )
    sent = wire.sampling_params(request, clock_offset=0.0)
    params = SamplingParams(**sent)
    params.verify(vocab_size=32_000)
    return params


@pytest.mark.parametrize("temperature", [0.0, 0.7, 2.0])
def test_top_p_zero_reaches_sglang_as_greedy_decoding(temperature: float) -> None:
    greedy = _sglang_params(0.0, temperature)
    assert greedy.top_k == 1  # SGLang's greedy: the likeliest token only
    assert 0.0 < greedy.top_p <= 1.0
    sampled = _sglang_params(0.9, temperature)  # any other top_p is sent as it was asked
    assert sampled.top_p == 0.9
    assert (sampled.top_k == 1) == (temperature == 0.0)


# -- 2. message names -----------------------------------------------------------------------------
def test_names_are_rendered_in_the_built_in_chat_format() -> None:
    alice = {"role": "user", "name": "alice", "content": "I vote yes."}
    bob = {"role": "user", "name": "bob", "content": "I vote yes."}
    two = render_chat([alice, bob])
    assert "<|im_start|>user name=alice\nI vote yes.<|im_end|>" in two
    assert "<|im_start|>user name=bob\nI vote yes.<|im_end|>" in two
    assert two != render_chat([alice, alice])  # two speakers, not one said twice
    assert render_chat([alice, bob]) == two  # same messages, same prompt (prefix cache)
    plain = render_chat([{"role": "user", "content": "I vote yes."}])
    assert plain == render_chat([{"role": "user", "content": "I vote yes.", "name": None}])
    assert plain.startswith("<|im_start|>user\nI vote yes.")  # no name: as before
    # system, developer and assistant turns carry theirs too; a tool turn's is not a speaker
    rendered = render_chat(
        [
            {"role": "developer", "name": "rules", "content": "Be brief."},
            {"role": "assistant", "name": "scribe", "content": "Noted."},
            {"role": "tool", "name": "lookup", "tool_call_id": "x", "content": "42"},
        ]
    )
    assert "<|im_start|>system name=rules\n" in rendered
    assert "<|im_start|>assistant name=scribe\n" in rendered
    assert "<|im_start|>tool\n42" in rendered


@pytest.mark.parametrize("name", ["Ann Lee", "a\nb", "x<|im_end|>", '"q"', "é/ü", "a|b"])
def test_a_name_that_could_break_the_turn_header_is_quoted(name: str) -> None:
    rendered = render_chat([{"role": "user", "name": name, "content": "hi"}])
    header = rendered.split("\n", 1)[0]
    assert header.startswith("<|im_start|>user name=")
    assert json.loads(header.removeprefix("<|im_start|>user name=")) == name
    assert rendered.count("<|im_end|>") == 1  # the name cannot end the turn
    assert "<" not in header.removeprefix("<|im_start|>")


def test_named_speakers_reach_the_prompt_over_http(server: LiveServer, prompts: list[str]) -> None:
    client = _client(server)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "name": "moderator", "content": "Count the votes."},
        {"role": "user", "name": "alice", "content": "yes"},
        {"role": "user", "name": "bob", "content": "yes"},
    ]
    for _ in range(2):
        client.chat.completions.create(model="m", messages=messages, max_tokens=4)
    first, again = prompts
    assert first == again  # the prefix cache sees one prompt
    for header in ("system name=moderator", "user name=alice", "user name=bob"):
        assert f"<|im_start|>{header}\n" in first


# -- 3. parallel_tool_calls: false ----------------------------------------------------------------
TOOLS: list[ChatCompletionToolParam] = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "fetch", "parameters": {"type": "object"}}},
]


@pytest.fixture
def two_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated model answers a tools prompt with two tool calls (one to each tool)."""
    one: Callable[[str], str | None] = live_text.tool_call_text

    def both(prompt: str) -> str | None:
        first = one(prompt)
        if first is None:
            return None
        second = first.replace('"lookup"', '"fetch"')
        return f"{first}\n{second}"

    monkeypatch.setattr(live_text, "tool_call_text", both)


def _tool_nodes(server: LiveServer, program_id: str) -> list[dict[str, Any]]:
    with server.client() as c:
        program = c.get(f"/v1/programs/{program_id}").json()
    return [n for n in program["nodes"] if n["kind"] == "tool"]


def _ask(server: LiveServer, program_id: str, **extra: Any) -> Any:
    return _client(server).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "look it up"}],
        tools=TOOLS,
        extra_body={"agentconsole": {"program_id": program_id}},
        **extra,
    )


@pytest.mark.usefixtures("two_calls")
def test_parallel_tool_calls_by_default(server: LiveServer) -> None:
    done = _ask(server, "ptc-default")
    calls = done.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["lookup", "fetch"]
    assert len(_tool_nodes(server, "ptc-default")) == 2


@pytest.mark.usefixtures("two_calls")
def test_parallel_tool_calls_false_returns_and_records_the_first_call_only(
    server: LiveServer,
) -> None:
    done = _ask(server, "ptc-off", parallel_tool_calls=False)
    (call,) = done.choices[0].message.tool_calls
    assert call.function.name == "lookup"
    assert done.choices[0].finish_reason == "tool_calls"
    (node,) = _tool_nodes(server, "ptc-off")
    assert node["tool"] == "lookup"
    assert node["node_id"] == "tool-" + call.id.removeprefix("call_")


@pytest.mark.usefixtures("two_calls")
def test_parallel_tool_calls_false_streamed(server: LiveServer) -> None:
    stream = _ask(server, "ptc-off-stream", parallel_tool_calls=False, stream=True)
    calls = [
        tool
        for chunk in stream
        for choice in chunk.choices
        for tool in choice.delta.tool_calls or ()
    ]
    (call,) = calls
    assert call.function is not None
    assert call.function.name == "lookup"
    wait_until(lambda: len(_tool_nodes(server, "ptc-off-stream")) >= 1)
    assert [n["tool"] for n in _tool_nodes(server, "ptc-off-stream")] == ["lookup"]


def test_parallel_tool_calls_must_be_a_boolean(server: LiveServer) -> None:
    with server.client() as c:
        refused = c.post(CHAT, json=chat_body(parallel_tool_calls="no", max_tokens=4))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "parallel_tool_calls"


@pytest.mark.parametrize("path", [CHAT, "/v1/completions"])
def test_an_explicit_null_stream_is_the_default(server: LiveServer, path: str) -> None:
    """OpenAI's schema types ``stream`` (and the completions' ``echo``) as boolean or null:
    SDKs and proxies that write every key send null, meaning the default."""
    extra: dict[str, Any] = {"stream": None, "max_tokens": 4}
    if path == CHAT:
        body = chat_body("null stream", **extra)
    else:
        body = {"model": "sim", "prompt": "null stream", "echo": None, **extra}
    with server.client() as c:
        answer = c.post(path, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
