"""A model with its own (Llama-3-style) chat template served by the real SGLang engine: the
prompt SGLang receives is that template's rendering, ``tool_choice`` required / named makes the
model call a tool in its own format (constrained decoding on the CPU engine) and the call is
parsed into OpenAI ``tool_calls``, streamed or not; ``/v1/completions`` tokenizes the prompt
as is. One engine, in process (the calls SGLang receives are recorded), for this module."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from tests.server.api.harness import LiveServer, make_config

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _tool(name: str, prop: str, values: list[str]) -> ChatCompletionToolParam:
    """A strict tool whose one argument is an enum (a random model's call then ends); keys
    in the order the API's validation keeps them (the template renders them in order)."""
    schema = {
        "type": "object",
        "properties": {prop: {"type": "string", "enum": values}},
        "required": [prop],
        "additionalProperties": False,
    }
    return {"type": "function", "function": {"name": name, "parameters": schema, "strict": True}}


TOOLS = [_tool("get_weather", "city", ["Paris", "Rome"]), _tool("get_time", "zone", ["UTC"])]
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Paris?"}]


class Served:
    def __init__(self, server: LiveServer, tokenizer: Any) -> None:
        self.server, self.tokenizer = server, tokenizer
        self.seen: list[Any] = []  # the GenerateReqInput of every call SGLang received
        self.client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-a", max_retries=0)

    async def record(self) -> None:
        tm = self.server.live.service.runtime.engine.tokenizer_manager  # type: ignore[attr-defined]
        original = tm.generate_request

        def recording(obj: Any, request: Any = None) -> Any:
            self.seen.append(obj)
            return original(obj, request)

        tm.generate_request = recording

    def received_ids(self) -> list[int]:
        """The token ids of the last call SGLang received (ids, or its text tokenized)."""
        obj = self.seen[-1]
        if obj.input_ids is not None:
            return list(obj.input_ids)
        return list(self.tokenizer(obj.text)["input_ids"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from transformers import AutoTokenizer

    from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("sglang-template")
    model = make_tiny_model(root / "llama3", chat_style="llama3")
    # SGLang's metrics register once per process: leave them to the session engine of the
    # sglang lane, whose tests read the queue times only metrics report
    extra = {"enable_metrics": False}
    config = make_config(
        root / "api.duckdb", runtime="sglang", model=str(model), runtime_extra=extra
    )
    with LiveServer(config) as server:
        server.wait_ready(timeout=300)
        served = Served(server, AutoTokenizer.from_pretrained(str(model)))
        server.run(served.record())
        yield served


def test_sglang_receives_the_models_own_template_rendering(served: Served) -> None:
    done = served.client.chat.completions.create(
        model="anything", messages=ASK, tools=TOOLS[:1], max_tokens=4
    )
    assert done.model == served.server.live.config.model_name
    expected = served.tokenizer.apply_chat_template(
        ASK, tools=TOOLS[:1], tokenize=False, add_generation_prompt=True
    )
    assert expected.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    obj = served.seen[-1]
    if obj.text is not None:
        assert obj.text == expected
    ids = served.tokenizer(expected, add_special_tokens=False)["input_ids"]
    assert served.received_ids() == ids
    assert done.usage is not None
    assert done.usage.prompt_tokens == len(ids)
    assert served.server.live.service.runtime.chat_format.name == "template+llama3"


def test_tool_choice_required_and_named_make_the_model_call_in_its_format(
    served: Served,
) -> None:
    done = served.client.chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120
    )
    sampling = served.seen[-1].sampling_params
    assert json.loads(sampling["structural_tag"])["format"]["triggers"] == ["<|python_tag|>"]
    message = done.choices[0].message
    assert done.choices[0].finish_reason == "tool_calls", message
    (call,) = message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.name in ("get_weather", "get_time")
    arguments = json.loads(call.function.arguments)
    assert arguments in ({"city": "Paris"}, {"city": "Rome"}, {"zone": "UTC"})
    assert not message.content  # the markup is not text
    named = served.client.chat.completions.create(
        model="m",
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=120,
    )
    (call,) = named.choices[0].message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "get_time"
    assert json.loads(call.function.arguments) == {"zone": "UTC"}


def test_a_streamed_required_call_arrives_as_tool_calls_without_markup(served: Served) -> None:
    chunks = list(
        served.client.chat.completions.create(
            model="m",
            messages=ASK,
            tools=TOOLS[:1],
            tool_choice="required",
            max_tokens=120,
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "python_tag" not in text
    assert "{" not in text
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    calls = [tc.function for tc in deltas if tc.function is not None]
    assert [f.name for f in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments or "")["city"] in ("Paris", "Rome")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_a_completion_prompt_is_tokenized_as_is(served: Served) -> None:
    done = served.client.completions.create(
        model="m", prompt="The quick brown fox", max_tokens=6, temperature=0
    )
    assert done.object == "text_completion"
    assert done.model == served.server.live.config.model_name
    ids = served.tokenizer("The quick brown fox")["input_ids"]
    assert served.received_ids() == ids
    assert done.usage is not None
    assert done.usage.prompt_tokens == len(ids)
    assert 0 < done.usage.completion_tokens <= 6


def test_penalties_and_logit_bias_reach_the_engine_and_change_the_answer(served: Served) -> None:
    prompt = "The quick brown fox"
    plain = served.client.completions.create(model="m", prompt=prompt, max_tokens=3, temperature=0)
    (forced,) = served.tokenizer("Z", add_special_tokens=False)["input_ids"]
    forced_text = served.tokenizer.decode([forced] * 3)
    assert plain.choices[0].text != forced_text
    bias = {str(forced): 100}
    biased = served.client.completions.create(
        model="m",
        prompt=prompt,
        max_tokens=3,
        temperature=0,
        frequency_penalty=0.5,
        presence_penalty=0.5,
        logit_bias=bias,
    )
    sampling = served.seen[-1].sampling_params
    assert (sampling["frequency_penalty"], sampling["presence_penalty"]) == (0.5, 0.5)
    assert sampling["logit_bias"] == {str(forced): 100.0}
    # +100 outweighs a random model's logits and the penalties: every token is the biased one
    assert biased.choices[0].text == forced_text
    chat = served.client.chat.completions.create(
        model="m", messages=ASK, max_tokens=3, temperature=0, logit_bias=bias
    )
    assert chat.choices[0].message.content == forced_text


def test_a_logit_bias_past_the_vocabulary_never_reaches_the_engine(served: Served) -> None:
    runtime = served.server.live.service.runtime
    vocab = runtime.engine.tokenizer_manager.model_config.vocab_size  # type: ignore[attr-defined]
    sent = len(served.seen)
    with pytest.raises(openai.BadRequestError) as refused:
        served.client.completions.create(
            model="m", prompt="hi", max_tokens=2, logit_bias={str(vocab): -100}
        )
    assert refused.value.param == f"logit_bias.{vocab}"
    assert len(served.seen) == sent  # refused before the engine saw it
    last = served.client.completions.create(
        model="m", prompt="hi", max_tokens=2, logit_bias={str(vocab - 1): -100}
    )
    assert last.choices[0].finish_reason in ("stop", "length")
