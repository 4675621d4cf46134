"""``tool_choice`` on SGLang: constrained decoding makes the model call a tool.

``tool_choice: "required"`` or a named function is honoured the way SGLang's own OpenAI server
does it: ``FunctionCallParser.get_structure_constraint`` gives the constraint for the model's
tool-call format (a structural tag: the call's begin marker, its arguments' JSON schema, its
end marker), sent in ``sampling_params`` and enforced by SGLang's grammar backend (xgrammar; it
runs on the CPU engine). Two changes to SGLang's legacy tag, both so that a call ends: the
answer is exactly one call (``at_least_one`` + ``stop_after_first``: no text before or after,
no parallel calls), and at most :data:`MAX_WHITESPACE` whitespace characters in a row inside
the arguments (a free JSON grammar lets a weak model emit whitespace until ``max_tokens``). A
non-strict function's arguments must be a JSON object (SGLang allows any JSON there);
``strict: true`` enforces its ``parameters`` schema. When tools are declared at all, the answer
keeps special tokens (``skip_special_tokens: false``, as SGLang does), since a model's
tool-call markers often are special tokens.

:class:`ServedFormat` (the runtime's ``chat_format``) puts those entries in the rendered
``Prompt.sampling``; the call carries them to the adapter (``GenerationRequest.sampling``),
which sends them with the request.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agentconsole.scheduler.runtime import ChatFormat, Prompt, ToolCallStream, ToolCallTuple
from agentconsole.server.live.chatml import offered_tools

logger = logging.getLogger("agentconsole.sglang")
MAX_WHITESPACE = 16


def sglang_tools(tools: Sequence[Mapping[str, Any]]) -> list[Any]:
    """OpenAI tool objects as SGLang's ``Tool`` models."""
    from sglang.srt.entrypoints.openai.protocol import Tool

    return [Tool.model_validate(dict(t)) for t in tools]


def parser(tools: Sequence[Mapping[str, Any]], name: str) -> Any:
    """A fresh ``FunctionCallParser`` (it keeps streaming state) for ``tools``."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser

    return FunctionCallParser(sglang_tools(tools), name)


def constraint(
    tools: Sequence[Mapping[str, Any]] | None, choice: object, parser_name: str
) -> dict[str, Any]:
    """``sampling_params`` entries that make the answer one call of a declared tool (empty
    unless ``choice`` is ``"required"`` or names a function)."""
    declared, required = offered_tools(tools, choice)
    if not declared or not required:
        return {}
    from sglang.srt.entrypoints.openai.protocol import ToolChoice

    wanted: object = "required"
    if isinstance(choice, Mapping):
        wanted = ToolChoice.model_validate({"type": "function", "function": choice["function"]})
    made = parser(declared, parser_name).get_structure_constraint(wanted, parallel_tool_calls=False)
    if made is None:
        logger.warning("SGLang has no constraint for tool_choice with parser %s", parser_name)
        return {}
    kind, value = made
    data = value.model_dump(by_alias=True) if hasattr(value, "model_dump") else value
    if kind == "structural_tag" and isinstance(data, dict) and "structures" in data:
        return {"structural_tag": json.dumps(_one_call(data))}
    if kind == "full_assistant_ebnf":
        return {"ebnf": value, "ebnf_full_assistant": True}
    return {kind: data if isinstance(data, str) else json.dumps(data)}


def _one_call(legacy: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's legacy structural tag as xgrammar's triggered tags: exactly one call, bounded
    whitespace, object arguments (see the module docstring)."""
    tags = []
    for item in legacy["structures"]:
        schema = item.get("schema") or {"type": "object"}
        content = {"type": "json_schema", "json_schema": schema}
        content["max_whitespace_cnt"] = MAX_WHITESPACE
        tags.append({"type": "tag", "begin": item["begin"], "content": content, "end": item["end"]})
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": list(legacy["triggers"]),
            "tags": tags,
            "at_least_one": True,
            "stop_after_first": True,
        },
    }


class ServedFormat:
    """The SGLang runtime's ``chat_format``: ``inner`` renders and parses; this adds the
    sampling entries a rendered prompt needs (see the module docstring)."""

    def __init__(self, inner: ChatFormat, constraint_parser: str) -> None:
        self.inner = inner
        self.constraint_parser = constraint_parser

    @property
    def name(self) -> str:
        return self.inner.name

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: object,
        *,
        reasoning_effort: str | None = None,
    ) -> Prompt:
        prompt = self.inner.render(messages, tools, tool_choice, reasoning_effort=reasoning_effort)
        declared, _ = offered_tools(tools, tool_choice)
        if not declared:
            return prompt
        extras: dict[str, Any] = {"skip_special_tokens": False}
        extras.update(constraint(tools, tool_choice, self.constraint_parser))
        return dataclasses.replace(prompt, sampling=extras)

    def encode(self, text: str) -> Prompt:
        return self.inner.encode(text)

    def parse(
        self, text: str, tools: Sequence[Mapping[str, Any]]
    ) -> tuple[str, list[ToolCallTuple]]:
        return self.inner.parse(text, tools)

    def stream(self, tools: Sequence[Mapping[str, Any]]) -> ToolCallStream:
        return self.inner.stream(tools)
