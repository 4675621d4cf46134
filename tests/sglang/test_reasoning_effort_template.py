"""A chat request's ``reasoning_effort`` in the served model's chat template, without an engine:
it reaches the template as the keyword of that name, as SGLang's own OpenAI server passes it
(only when asked), so a reasoning model's template reads it; a template that does not read it,
and the built-in ChatML, render the prompt as without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentconsole.server.live.chatformat import ChatMLFormat
from agentconsole.server.live.prompt import render_prompt
from agentconsole.server.runtime.sglang.chat_template import build_format
from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model
from agentconsole.server.runtime.sglang.tool_choice import ServedFormat

pytestmark = pytest.mark.sglang

USER = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}
#: a reasoning model's template in miniature: its system turn says how hard to think, and
#: only when the request asked (``is defined``: the keyword is absent otherwise)
REASONING_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
    "{% if m['role'] == 'system' and reasoning_effort is defined %}"
    " Reasoning: {{ reasoning_effort }}{% endif %}{% endfor %}"
    "{% if tools %}<|tools|>{{ tools | length }}{% endif %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _tokenizer(root: Path, style: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(make_tiny_model(root / style, chat_style=style)))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="module")
def reasoning(models: Path) -> ServedFormat:
    tokenizer = _tokenizer(models, "chatml")
    tokenizer.chat_template = REASONING_TEMPLATE
    return build_format(tokenizer)


@pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high"])
def test_a_template_that_reads_reasoning_effort_sees_it(
    reasoning: ServedFormat, effort: str
) -> None:
    prompt = render_prompt(reasoning, USER, reasoning_effort=effort)
    assert f"<|system|>Be brief. Reasoning: {effort}<|user|>" in prompt.text
    assert prompt.token_ids is not None
    assert len(prompt.token_ids) == prompt.tokens
    # with tools too (the format adds their constraint; the keyword still reaches the template)
    with_tools = render_prompt(reasoning, USER, [WEATHER], "required", reasoning_effort=effort)
    assert f"Reasoning: {effort}" in with_tools.text
    assert "<|tools|>1" in with_tools.text


def test_not_asked_the_template_keeps_its_default(reasoning: ServedFormat) -> None:
    """No keyword at all (not ``None``): ``is defined`` is false, as with SGLang's server."""
    prompt = render_prompt(reasoning, USER)
    assert prompt.text == "<|system|>Be brief.<|user|>Weather?<|assistant|>"
    assert render_prompt(reasoning, USER, reasoning_effort=None) == prompt


@pytest.mark.parametrize("style", ["llama3", "chatml"])
def test_a_template_that_does_not_read_it_renders_unchanged(models: Path, style: str) -> None:
    """The tiny model's own templates (no reasoning switch) and the built-in ChatML (a model
    without a template, the simulator) give the same prompt, ids included, whatever is asked."""
    fmt = build_format(_tokenizer(models, style))
    plain = render_prompt(fmt, USER, [WEATHER], "auto")
    assert render_prompt(fmt, USER, [WEATHER], "auto", reasoning_effort="high") == plain
    chatml = ChatMLFormat()
    assert chatml.render(USER, None, "auto", reasoning_effort="low") == chatml.render(
        USER, None, "auto"
    )
