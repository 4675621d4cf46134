"""The served model's own chat format on SGLang: its tokenizer's chat template, SGLang's
tool-call parser for it, and its tokenizer's ids.

:func:`build_format` is what the adapter calls once the engine is up, with the engine's own
tokenizer (so a prompt's ids are exactly what SGLang would have made of its text):

* **Template.** A tokenizer with a ``chat_template`` renders chats with it
  (``apply_chat_template(messages, tools=..., add_generation_prompt=True)``), messages shaped as
  SGLang's OpenAI server shapes them (content as text, a tool call's arguments as an object),
  and a request's ``reasoning_effort``, when it names one, passed as the template keyword of
  that name (as SGLang's server passes it: reasoning models' templates read it);
  a template that refuses them is a ``ValueError`` (400 at the API). Without a template the
  built-in ChatML is used (:class:`~agentconsole.server.live.chatformat.ChatMLFormat`).
* **Tool calls.** Parsed by SGLang's ``FunctionCallParser`` with a parser chosen as
  :func:`pick_parser` says: the configured ``tool_call_parser``, else SGLang's own detection from
  the template (``--tool-call-parser auto``), else the template's markers (``<|python_tag|>``
  -> ``llama3``, ``[TOOL_CALLS]`` -> ``mistral``, ``<tool_call>`` -> ``hermes``), else
  ``hermes``. A stream shows text as SGLang's streaming parser releases it; the calls (and
  what it held that was no call) come from parsing the whole answer at the end, so a streamed
  and a non-streamed answer agree.
* **Tokens.** A chat prompt is tokenized without added special tokens (the template writes
  them); a raw ``/v1/completions`` prompt with them, as SGLang tokenizes text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agentconsole.scheduler.runtime import Prompt, ToolCallTuple
from agentconsole.server.live.chatformat import ChatMLFormat, Tokenize
from agentconsole.server.live.chatml import message_text, offered_tools, tool_call_arguments
from agentconsole.server.runtime.sglang import tool_choice
from agentconsole.server.runtime.sglang.tool_choice import ServedFormat

logger = logging.getLogger("agentconsole.sglang")
#: template text -> parser, for templates SGLang's detection does not recognise
_MARKERS = (("<|python_tag|>", "llama3"), ("[TOOL_CALLS]", "mistral"), ("<tool_call>", "hermes"))
DEFAULT_PARSER = "hermes"


def tokenizer_prompts(tokenizer: Any) -> Tokenize:
    """``(text, special) -> Prompt`` with the tokenizer's ids."""

    def tokenize(text: str, special: bool) -> Prompt:
        ids = tuple(int(i) for i in tokenizer(text, add_special_tokens=special)["input_ids"])
        return Prompt(text, len(ids), ids)

    return tokenize


def pick_parser(template: str, tokenizer: Any, configured: str | None = None) -> tuple[str, str]:
    """(SGLang tool-call parser name, how it was chosen) for a model's chat template."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.template_detection import detect_tool_call_parser

    known = FunctionCallParser.ToolCallParserEnum
    if configured:
        if configured not in known:
            raise ValueError(
                f"unknown tool_call_parser {configured!r}; SGLang knows {sorted(known)}"
            )
        return configured, "configured"
    detected = detect_tool_call_parser(template, tokenizer)
    if detected in known:
        return str(detected), "detected by SGLang"
    if "<|start_header_id|>" in template and "ipython" in template:
        return "llama3", "template markers"
    for marker, name in _MARKERS:
        if marker in template:
            return name, "template markers"
    return DEFAULT_PARSER, "default"


def _chat_message(message: Mapping[str, Any], index: int) -> dict[str, Any]:
    """An OpenAI message (``messages[index]``) as chat templates read it (SGLang's shaping):
    text content, a tool call's arguments as an object, ``developer`` as ``system``. Arguments
    that are not JSON reach the template as the text sent; JSON nested too deep for the
    template's recursive filters is refused (400 ``invalid_json``), as the built-in ChatML
    refuses it (``chatml.tool_call_arguments``: one rule whatever the served model)."""
    out = {k: v for k, v in message.items() if v is not None}
    out["role"] = "system" if message.get("role") == "developer" else message.get("role")
    out["content"] = message_text(message.get("content"))
    calls = []
    for number, call in enumerate(message.get("tool_calls") or ()):
        function = dict(call.get("function", {}))
        field = f"messages.{index}.tool_calls.{number}.function.arguments"
        function["arguments"] = tool_call_arguments(function.get("arguments", "{}"), field)
        calls.append({**call, "function": function})
    if calls:
        out["tool_calls"] = calls
    return out


class TemplateFormat:
    """A tokenizer's chat template with an SGLang tool-call parser (see the module docstring)."""

    def __init__(self, tokenizer: Any, parser: str) -> None:
        self._tokenizer = tokenizer
        self.parser = parser
        self._tokenize = tokenizer_prompts(tokenizer)

    @property
    def name(self) -> str:
        return f"template+{self.parser}"

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: object,
        *,
        reasoning_effort: str | None = None,
    ) -> Prompt:
        declared, _ = offered_tools(tools, tool_choice)
        chat = [_chat_message(m, index) for index, m in enumerate(messages)]
        # as SGLang's OpenAI server: the keyword only when asked, so a template that tests
        # ``reasoning_effort is defined`` keeps its default otherwise
        extra = {} if reasoning_effort is None else {"reasoning_effort": reasoning_effort}
        tools_in = [dict(t) for t in declared] or None
        return self._tokenize(self._apply(chat, tools_in, extra), False)

    def _apply(
        self, chat: list[dict[str, Any]], tools: list[dict[str, Any]] | None, extra: dict[str, Any]
    ) -> str:
        try:
            return str(self._template(chat, tools, extra))
        except Exception as error:  # jinja2's TemplateError, raise_exception, TypeError, ...
            if tools:
                # some templates (Mistral's) want bare functions, without OpenAI's wrapper
                flat = [t.get("function", t) for t in tools]
                try:
                    return str(self._template(chat, flat, extra))
                except Exception:
                    pass
            raise ValueError(str(error) or type(error).__name__) from error

    def _template(
        self, chat: list[dict[str, Any]], tools: list[dict[str, Any]] | None, extra: dict[str, Any]
    ) -> Any:
        return self._tokenizer.apply_chat_template(
            chat, tools=tools, tokenize=False, add_generation_prompt=True, **extra
        )

    def encode(self, text: str) -> Prompt:
        return self._tokenize(text, True)

    def parse(
        self, text: str, tools: Sequence[Mapping[str, Any]]
    ) -> tuple[str, list[ToolCallTuple]]:
        """SGLang's parse of a whole answer; without a call the answer is plain text, as it is
        when the parser fails on what the model wrote (SGLang's parsers raise on a call body
        that is JSON but not an object: the model's text, not the server, is at fault)."""
        if not tools:
            return text, []
        try:
            normal, items = tool_choice.parser(tools, self.parser).parse_non_stream(text)
        except Exception:
            logger.warning(
                "tool-call parser %s failed; answered as text", self.parser, exc_info=True
            )
            return text, []
        calls = [(str(item.name), item.parameters) for item in items if item.name]
        return (str(normal) if calls else text), calls

    def stream(self, tools: Sequence[Mapping[str, Any]]) -> TemplateStream:
        return TemplateStream(self, tools)


class TemplateStream:
    """One streamed answer: text as SGLang's streaming parser releases it, calls at the end."""

    def __init__(self, fmt: TemplateFormat, tools: Sequence[Mapping[str, Any]]) -> None:
        self._format = fmt
        self._tools = list(tools)
        self._parser = tool_choice.parser(tools, fmt.parser) if tools else None
        self._failed = False
        self._seen: list[str] = []
        self._sent: list[str] = []

    def feed(self, text: str) -> str:
        self._seen.append(text)
        if self._parser is None:
            return text
        if self._failed:
            return ""
        try:
            shown = str(self._parser.parse_stream_chunk(text)[0])
        except Exception:  # a parser failure must not end the stream: hold the rest
            logger.debug("streaming tool-call parser failed", exc_info=True)
            self._failed, shown = True, ""
        self._sent.append(shown)
        return shown

    def finish(self) -> tuple[str, list[ToolCallTuple]]:
        if not self._tools:
            return "", []
        full, sent = "".join(self._seen), "".join(self._sent)
        normal, calls = self._format.parse(full, self._tools)
        if not calls:
            normal = full  # no call after all: release everything held back
        return (normal[len(sent) :] if normal.startswith(sent) else ""), calls


def build_format(tokenizer: Any, configured_parser: str | None = None) -> ServedFormat:
    """The chat format of the model behind ``tokenizer`` (see the module docstring)."""
    template = getattr(tokenizer, "chat_template", None)
    tokenize = tokenizer_prompts(tokenizer)
    if not isinstance(template, str) or not template:
        # no template: the built-in ChatML, whose <tool_call>\n...\n</tool_call> blocks are
        # what SGLang's qwen parser constrains a required call to
        return ServedFormat(ChatMLFormat(tokenize, name="chatml"), "qwen")
    parser, how = pick_parser(template, tokenizer, configured_parser)
    logger.debug("chat format: the model's template, tool-call parser %s (%s)", parser, how)
    return ServedFormat(TemplateFormat(tokenizer, parser), parser)


__all__ = ["TemplateFormat", "build_format", "pick_parser", "tokenizer_prompts"]
