"""OpenAI request fields and answer keys the official ``openai`` client meets, over real HTTP:

1. ``frequency_penalty``, ``presence_penalty`` and ``logit_bias`` are honoured: bounded as
   OpenAI bounds them (400 naming the field), carried to the runtime's request and sent to
   SGLang only when asked; a ``logit_bias`` token id past the model's vocabulary is refused
   (400) before anything is opened or sent to the engine.
2. The legacy ``functions``/``function_call`` and audio (``audio``, ``modalities`` other than
   text) are refused naming what to send instead, never dropped.
3. Answers carry ``system_fingerprint`` (null); a stream that asked
   ``stream_options.include_usage`` says ``"usage": null`` on every chunk before the usage
   chunk; a streamed answer that is only tool calls opens with ``content: null``. Both lanes
   (the express lane and Litestar's controllers) answer alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionToolParam

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.live.errors import InvalidRequest
from agentconsole.server.live.intake import check_logit_bias
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from tests.server.api.harness import LiveServer, both_lanes, chat_body, make_config
from tests.server.api.recording import RecordingRuntime

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
#: the vocabulary the recording runtime says its model has
VOCAB = 1000
TOOLS: list[ChatCompletionToolParam] = [
    {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
]


class VocabRuntime(RecordingRuntime):
    """The recording runtime with a vocabulary of :data:`VOCAB` ids."""

    vocab_size = VOCAB


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    """A server with the express lane and one without (Litestar's controllers answer)."""
    with both_lanes(Path(tmp_path_factory.mktemp("gaps")), VocabRuntime) as (lane, plain):
        yield {"lane": lane, "plain": plain}


@pytest.fixture(params=["lane", "plain"])
def server(request: pytest.FixtureRequest, servers: dict[str, LiveServer]) -> LiveServer:
    return servers[request.param]


def _runtime(server: LiveServer) -> VocabRuntime:
    runtime = server.live.service.runtime
    assert isinstance(runtime, VocabRuntime)
    return runtime


def _client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-a", max_retries=0)


def _post(server: LiveServer, path: str, body: dict[str, Any]) -> httpx.Response:
    with server.client() as client:
        return client.post(path, json=body)


def _frames(answer: httpx.Response) -> list[dict[str, Any]]:
    """The JSON frames of a streamed answer (``[DONE]`` checked and left out)."""
    assert answer.status_code == 200, answer.text
    lines = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


# -- 1. penalties and logit_bias -------------------------------------------------------------------
def test_penalties_and_logit_bias_reach_the_runtime(server: LiveServer) -> None:
    client, sent = _client(server), _runtime(server).sent
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "penalised"}],
        max_tokens=4,
        frequency_penalty=0.5,
        presence_penalty=-2,
        logit_bias={"7": -100, "999": 5},
    )
    asked = sent[-1]
    assert (asked.frequency_penalty, asked.presence_penalty) == (0.5, -2.0)
    assert asked.logit_bias == {7: -100.0, 999: 5.0}
    # OpenAI's schema types the biases as integers; a fraction within bounds is taken too
    fraction = _post(server, CHAT, chat_body("fraction", max_tokens=4, logit_bias={"3": 0.5}))
    assert fraction.status_code == 200, fraction.text
    assert sent[-1].logit_bias == {3: 0.5}
    client.completions.create(
        model="m", prompt="penalised text", max_tokens=4, frequency_penalty=2, logit_bias={"0": 1}
    )
    asked = sent[-1]
    assert (asked.frequency_penalty, asked.presence_penalty) == (2.0, None)
    assert asked.logit_bias == {0: 1.0}
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "plain"}], max_tokens=4
    )
    asked = sent[-1]  # not asked: not set
    assert (asked.frequency_penalty, asked.presence_penalty, asked.logit_bias) == (None,) * 3


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_an_empty_stop_string_is_left_out(server: LiveServer, path: str) -> None:
    """An empty stop string is in every output's tail: sent on, SGLang would end the answer
    at its first token."""
    body = chat_body("stops", max_tokens=4) if path == CHAT else {"model": "m", "prompt": "x"}
    for stop, sent in (("", ()), (["", "END"], ("END",)), ("END", ("END",))):
        assert _post(server, path, {**body, "stop": stop}).status_code == 200
        assert _runtime(server).sent[-1].stop == sent


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"frequency_penalty": 2.5}, "frequency_penalty"),
        ({"presence_penalty": -2.01}, "presence_penalty"),
        ({"frequency_penalty": "1"}, "frequency_penalty"),
        ({"logit_bias": {"12": 100.5}}, "logit_bias.12"),
        ({"logit_bias": {"12": "1"}}, "logit_bias.12"),
        ({"logit_bias": {"token": 1}}, "logit_bias.token.[key]"),
        ({"logit_bias": {"-1": 1}}, "logit_bias.-1.[key]"),
        ({"logit_bias": {"07": 1}}, "logit_bias.07.[key]"),
        ({"logit_bias": {str(i): 1 for i in range(301)}}, "logit_bias"),
    ],
)
def test_out_of_bounds_penalties_and_biases_are_refused_naming_them(
    server: LiveServer, path: str, extra: dict[str, Any], param: str
) -> None:
    body = chat_body("bounds", **extra) if path == CHAT else {"model": "m", "prompt": "b", **extra}
    refused = _post(server, path, body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == param


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_token_id_past_the_vocabulary_is_refused_before_anything_runs(
    server: LiveServer, path: str
) -> None:
    sent = _runtime(server).sent
    before = len(sent)
    pid = "vocab-chat" if path == CHAT else "vocab-text"
    extra = {"logit_bias": {"5": 1, str(VOCAB): -100}, "agentconsole": {"program_id": pid}}
    body = chat_body("bias", **extra) if path == CHAT else {"model": "m", "prompt": "b", **extra}
    refused = _post(server, path, body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == f"logit_bias.{VOCAB}"
    assert "vocabulary" in error["message"]
    assert len(sent) == before  # nothing reached the engine
    with server.client() as client:  # and no program was opened for it
        assert client.get(f"/v1/programs/{pid}").status_code == 404
    # the last id of the vocabulary is in it
    body["logit_bias"] = {str(VOCAB - 1): 1}
    assert _post(server, path, body).status_code == 200


def test_check_logit_bias_and_the_vocabulary_a_runtime_says() -> None:
    """``check_logit_bias`` itself: ids within ``[0, vocab)`` pass, an unknown vocabulary
    checks nothing, and a runtime says its vocabulary by ``vocab_size`` (else none)."""
    check_logit_bias({0: 1.0, 9: -1.0}, 10)
    check_logit_bias({10**9: 1.0}, None)
    check_logit_bias(None, 10)
    with pytest.raises(InvalidRequest) as refused:
        check_logit_bias({3: 1.0, 10: 1.0}, 10)
    assert refused.value.field == "logit_bias.10"
    assert refused.value.status == 422
    runtime = SimLiveRuntime(preset("H200-141GB", "llama-3.1-8b", 1))
    assert runtime.vocab_size is None  # the simulator samples no real tokens


def test_the_simulator_without_a_vocabulary_takes_any_bias(tmp_path: Path) -> None:
    with LiveServer(make_config(tmp_path / "sim.duckdb")) as plain:
        plain.wait_ready()
        done = _client(plain).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "anything"}],
            max_tokens=4,
            frequency_penalty=1,
            presence_penalty=1,
            logit_bias={"123456789": -100},
        )
    assert done.choices[0].message.content


def _request(**changes: Any) -> GenerationRequest:
    ticket = CallTicket(call_id="c", program_id="p", node_id="n", tenant="t", arrival=0.0)
    return GenerationRequest(ticket, "hi", 4, **changes)


def test_sglang_is_sent_penalties_and_bias_only_when_asked() -> None:
    from sglang.srt.sampling.sampling_params import SamplingParams

    plain = wire.sampling_params(_request(), clock_offset=0.0)
    assert not {"frequency_penalty", "presence_penalty", "logit_bias"} & set(plain)
    asked = _request(frequency_penalty=-0.5, presence_penalty=2.0, logit_bias={7: -100.0})
    sent = wire.sampling_params(asked, clock_offset=0.0)
    assert sent["frequency_penalty"] == -0.5
    assert sent["presence_penalty"] == 2.0
    assert sent["logit_bias"] == {"7": -100.0}  # SGLang's keys: ids as strings
    params = SamplingParams(**sent)  # what SGLang makes of them, as its tokenizer manager does
    params.verify(vocab_size=32_000)
    assert (params.frequency_penalty, params.presence_penalty) == (-0.5, 2.0)
    assert params.logit_bias == {"7": -100.0}


# -- 2. legacy functions and audio -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "param", "instead"),
    [
        (
            {"functions": [{"name": "lookup", "parameters": {"type": "object"}}]},
            "functions",
            "tools",
        ),
        ({"function_call": "auto"}, "function_call", "tool_choice"),
        ({"function_call": {"name": "lookup"}}, "function_call", "tool_choice"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "text only"),
        ({"modalities": ["text", "audio"]}, "modalities", "['text']"),
        ({"modalities": ["audio"]}, "modalities", "['text']"),
    ],
)
def test_legacy_functions_and_audio_are_refused_naming_what_to_send(
    server: LiveServer, extra: dict[str, Any], param: str, instead: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        _client(server).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "legacy"}],
            max_tokens=4,
            extra_body=extra,
        )
    assert refused.value.param == param
    assert "is not supported" in refused.value.message
    assert instead in refused.value.message


@pytest.mark.parametrize("modalities", [["text"], None])
def test_text_modalities_pass(server: LiveServer, modalities: list[str] | None) -> None:
    answer = _post(server, CHAT, chat_body("text", max_tokens=4, modalities=modalities))
    assert answer.status_code == 200, answer.text


# -- 3. answer keys --------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_every_answer_and_chunk_says_system_fingerprint(server: LiveServer, path: str) -> None:
    body = chat_body("fp", max_tokens=4) if path == CHAT else {"model": "m", "prompt": "fp"}
    answer = _post(server, path, body)
    assert answer.status_code == 200, answer.text
    assert "system_fingerprint" in answer.json()
    assert answer.json()["system_fingerprint"] is None
    frames = _frames(_post(server, path, {**body, "stream": True}))
    assert all("system_fingerprint" in f and f["system_fingerprint"] is None for f in frames)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_stream_with_usage_says_null_usage_until_the_last_chunk(
    server: LiveServer, path: str
) -> None:
    body: dict[str, Any] = (
        chat_body("usage", max_tokens=6) if path == CHAT else {"model": "m", "prompt": "u"}
    )
    body.update(stream=True, stream_options={"include_usage": True})
    frames = _frames(_post(server, path, body))
    *before, last = frames
    assert len(before) >= 2
    assert all("usage" in f and f["usage"] is None for f in before)
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] > 0
    # not asked: no usage key at all, as before
    body["stream_options"] = {"include_usage": False}
    assert all("usage" not in f for f in _frames(_post(server, path, body)))


def test_a_streamed_tool_call_answer_opens_with_null_content(server: LiveServer) -> None:
    body = chat_body("look it up", max_tokens=64, tools=TOOLS, stream=True)
    first, *rest = _frames(_post(server, CHAT, body))
    delta = first["choices"][0]["delta"]
    assert delta["role"] == "assistant"
    assert "content" in delta
    assert delta["content"] is None
    assert [c["function"]["name"] for c in delta["tool_calls"]] == ["lookup"]
    assert "agentconsole" in first  # the call's identity, on the first chunk as ever
    assert rest[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert not any(f["choices"][0]["delta"].get("content") for f in rest)
    # the official client sees the same: no text, one call
    chunks = list(
        _client(server).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "look it up"}],
            tools=TOOLS,
            max_tokens=64,
            stream=True,
        )
    )
    assert chunks[0].choices[0].delta.content is None
    assert chunks[0].choices[0].delta.role == "assistant"
    calls = [t for c in chunks for t in c.choices[0].delta.tool_calls or ()]
    assert [t.function.name for t in calls if t.function] == ["lookup"]


@pytest.mark.parametrize("tools", [True, False])
def test_a_streamed_text_answer_opens_with_empty_content(server: LiveServer, tools: bool) -> None:
    # after a tool result the simulated model answers in text, tools declared or not
    messages = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": 8, "stream": True}
    if tools:
        body["tools"] = TOOLS
    first, *rest = _frames(_post(server, CHAT, body))
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(f["choices"][0]["delta"].get("content") or "" for f in rest)
    assert text
    assert rest[-1]["choices"][0]["finish_reason"] in ("stop", "length")
