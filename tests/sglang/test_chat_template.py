"""The served model's chat format without an engine: a tokenizer's own template renders the
chat (exact ids), SGLang's parser for it reads its tool calls (whole and streamed, markup held
back), ``tool_choice`` becomes SGLang's constraint, and a tokenizer without a template gets
the built-in ChatML."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentconsole.scheduler.runtime import ChatFormat
from agentconsole.server.live.chatml import render_chat
from agentconsole.server.live.errors import InvalidRequest
from agentconsole.server.live.prompt import render_prompt
from agentconsole.server.runtime.sglang.chat_template import build_format, pick_parser
from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model
from agentconsole.server.runtime.sglang.tool_choice import ServedFormat

pytestmark = pytest.mark.sglang

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
USER = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]
CALL = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'


def _tokenizer(root: Path, style: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(make_tiny_model(root / style, chat_style=style)))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="module")
def llama3(models: Path) -> Any:
    return _tokenizer(models, "llama3")


@pytest.fixture(scope="module")
def llama3_format(llama3: Any) -> ServedFormat:
    return build_format(llama3)


def test_the_template_renders_the_chat_with_exact_ids(llama3: Any, llama3_format: Any) -> None:
    fmt: ChatFormat = llama3_format
    assert fmt.name == "template+llama3"
    prompt = fmt.render(USER, [WEATHER], "auto")
    expected = llama3.apply_chat_template(
        USER, tools=[WEATHER], tokenize=False, add_generation_prompt=True
    )
    assert prompt.text == expected
    assert prompt.text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
    assert '"get_weather"' in prompt.text
    assert "<|im_start|>" not in prompt.text
    ids = llama3(expected, add_special_tokens=False)["input_ids"]
    assert prompt.token_ids == tuple(ids)
    assert prompt.tokens == len(ids)
    assert llama3.convert_tokens_to_ids("<|start_header_id|>") in ids  # one special token
    assert "get_weather" not in fmt.render(USER, [WEATHER], "none").text
    named = fmt.render(
        USER, [WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}}
    )
    assert '"get_time"' in named.text
    assert '"get_weather"' not in named.text
    raw = fmt.encode("hello there")
    assert raw.token_ids == tuple(llama3("hello there")["input_ids"])


def test_history_tool_calls_reach_the_template_as_objects(llama3_format: Any) -> None:
    history = [
        *USER,
        {
            "role": "assistant",
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
    text = llama3_format.render(history, [WEATHER], "auto").text
    assert CALL + "<|eot_id|>" in text
    assert "<|start_header_id|>ipython<|end_header_id|>\n\nsunny<|eot_id|>" in text


def test_the_models_tool_calls_are_parsed_whole_and_streamed(llama3_format: Any) -> None:
    answer = "Let me look. " + CALL
    text, calls = llama3_format.parse(answer, [WEATHER])
    assert calls == [("get_weather", '{"city": "Paris"}')]
    assert text == "Let me look. "
    assert llama3_format.parse("Sunny today.", [WEATHER]) == ("Sunny today.", [])
    stream = llama3_format.stream([WEATHER])
    shown = "".join(stream.feed(answer[i : i + 3]) for i in range(0, len(answer), 3))
    assert "<|" not in shown
    assert "{" not in shown
    rest, streamed = stream.finish()
    assert shown + rest == "Let me look. "
    assert streamed == calls
    plain = llama3_format.stream([WEATHER])
    shown = "".join(plain.feed(piece) for piece in ("It is ", "sunny", " <|pyth"))
    assert shown + plain.finish()[0] == "It is sunny <|pyth"  # held text that was no call


def test_a_call_body_the_parser_cannot_read_is_answered_as_text(llama3_format: Any) -> None:
    """SGLang's parsers raise on a call body that is JSON but not an object (the model wrote
    it): the answer is the model's text, whole and streamed, never an exception (one left the
    call's node running for good and the stream without its end)."""
    for body in ("<|python_tag|>[1]", '<|python_tag|>"x"'):
        assert llama3_format.parse(body, [WEATHER]) == (body, [])
        stream = llama3_format.stream([WEATHER])
        shown = "".join(stream.feed(body[i : i + 4]) for i in range(0, len(body), 4))
        rest, calls = stream.finish()
        assert (shown + rest, calls) == (body, [])


def test_tool_choice_becomes_sglangs_constraint(llama3_format: Any) -> None:
    fmt = llama3_format
    sampling = fmt.render(USER, [WEATHER], "required").sampling
    assert sampling["skip_special_tokens"] is False
    tag = json.loads(sampling["structural_tag"])["format"]
    assert tag["type"] == "triggered_tags"
    assert tag["triggers"] == ["<|python_tag|>"]
    assert tag["at_least_one"] is True
    assert tag["stop_after_first"] is True
    (item,) = tag["tags"]
    assert item["begin"] == '<|python_tag|>{"name":"get_weather", "arguments":'
    assert item["content"]["json_schema"] == {"type": "object"}  # not strict: any object
    named = {"type": "function", "function": {"name": "get_time"}}
    sampling = fmt.render(USER, [WEATHER, TIME], named).sampling
    tags = json.loads(sampling["structural_tag"])["format"]["tags"]
    assert [t["begin"] for t in tags] == ['<|python_tag|>{"name":"get_time", "arguments":']
    assert fmt.render(USER, [WEATHER], "auto").sampling == {"skip_special_tokens": False}
    assert fmt.render(USER, None, "auto").sampling == {}


def test_strict_tools_constrain_to_their_schema(llama3_format: Any) -> None:
    strict = json.loads(json.dumps(WEATHER))
    strict["function"]["strict"] = True
    sampling = llama3_format.render(USER, [strict], "required").sampling
    tag = json.loads(sampling["structural_tag"])["format"]
    assert tag["tags"][0]["content"]["json_schema"] == WEATHER["function"]["parameters"]


def test_parser_choice(models: Path, llama3: Any) -> None:
    chatml = _tokenizer(models, "chatml")
    assert pick_parser(llama3.chat_template, llama3) == ("llama3", "template markers")
    assert pick_parser(chatml.chat_template, chatml) == ("hermes", "default")
    assert pick_parser("... [TOOL_CALLS] ...", chatml) == ("mistral", "template markers")
    assert pick_parser(chatml.chat_template, chatml, "qwen") == ("qwen", "configured")
    with pytest.raises(ValueError, match="unknown tool_call_parser"):
        pick_parser(chatml.chat_template, chatml, "no-such-parser")


def test_without_a_template_the_builtin_chatml_is_used(models: Path) -> None:
    bare = _tokenizer(models, "none")
    assert bare.chat_template is None
    fmt = build_format(bare)
    assert fmt.name == "chatml"
    prompt = fmt.render(USER, [WEATHER], "required")
    assert prompt.text == render_chat(USER, [WEATHER], "required")
    assert prompt.token_ids == tuple(bare(prompt.text, add_special_tokens=False)["input_ids"])
    # a required call is constrained to the <tool_call> block ChatML declares
    tag = json.loads(prompt.sampling["structural_tag"])["format"]
    assert tag["tags"][0]["begin"] == '<tool_call>\n{"name":"get_weather", "arguments":'
    answer = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    assert fmt.parse(answer, [WEATHER]) == ("", [("get_weather", '{"city": "Rome"}')])


def test_a_template_that_refuses_the_messages_is_a_422(models: Path) -> None:
    strict = _tokenizer(models, "chatml")
    strict.chat_template = "{{ raise_exception('roles must alternate user/assistant') }}"

    with pytest.raises(InvalidRequest, match="roles must alternate") as refused:
        render_prompt(build_format(strict), USER)
    assert refused.value.status == 422
    assert refused.value.field == "messages"
