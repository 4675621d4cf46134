"""The built-in chat format's pieces: ChatML prompts and Hermes-style tool calls.

The built-in template is ChatML with Hermes-style tools (the format Qwen 2.5/3 and SGLang's
``qwen25`` tool parser use): the tools are declared as JSON lines between ``<tools>`` and
``</tools>`` at the end of the system turn, and the model calls one by answering
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. ``tool_choice="none"`` declares
no tools; ``"required"`` or a named function adds the line ``tool_choice: required`` (a named
function is the only one declared). A named system, user or assistant message says its
speaker in its turn header as OpenAI's ChatML does (``<|im_start|>user name=alice``), so two
participants of one role are not read as one.
:class:`~agentconsole.server.live.chatformat.ChatMLFormat` wraps these as a ``ChatFormat``; a
model with a chat template of its own is served with that instead
(``server/runtime/sglang/chat_template.py``: the template gets each message with its ``name``,
and renders it where the template reads it).

:class:`ToolCallFilter` splits a streamed answer into text that can be sent at once and a held
tail that may be a tool call, so a client never sees the raw ``<tool_call>`` markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentconsole.server.live.errors import InvalidRequest

START, END = "<|im_start|>", "<|im_end|>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_JSON = json.JSONDecoder()
#: a message name written bare in a turn header (OpenAI's own pattern for names, less ``"``)
_PLAIN_NAME = re.compile(r'[^\s<|\\/>"]+')
TOOLS_HELP = (
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags."
)


#: how deep a tool call's ``arguments`` JSON may nest: a request body's own bound
#: (``server/api/jsonguard.py`` ``MAX_JSON_DEPTH``, which this layer cannot import: the API
#: imports it), since the decoded arguments go on to recursive code as a body does (the
#: prompt's ``json.dumps``, a chat template's filters)
MAX_ARGUMENTS_DEPTH = 64


class ArgumentsTooDeep(InvalidRequest):
    """A tool call's ``arguments`` text nests deeper than :data:`MAX_ARGUMENTS_DEPTH`: 400
    ``invalid_json``, as a request body nested that deep is answered, naming the field. Not
    passed on as text: below Python's recursion limit it decodes, and a template would then
    get an object or a string depending on depth alone; the client's text is what is wrong."""

    status = 400
    type = "invalid_json"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One parsed tool call; ``arguments`` is the JSON text OpenAI clients expect."""

    name: str
    arguments: str


def message_text(content: object) -> str:
    """The text of a message's ``content``: a string, or the text parts of a part list. A
    part of another type (an image, audio, a file) is refused (422), not dropped: the served
    models read text only, and the prompt without it is not the one the client sent (the HTTP
    edge refuses them first; this holds for every other caller)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            kind = part.get("type", "text") if isinstance(part, Mapping) else "text"
            if kind != "text":
                raise InvalidRequest(
                    f"content part type {str(kind)[:64]!r} is not supported: the served models read"
                    " text only",
                    field="messages",
                )
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)


def offered_tools(
    tools: Sequence[Mapping[str, Any]] | None, tool_choice: object
) -> tuple[list[Mapping[str, Any]], bool]:
    """The tools to declare and whether a call is required, from ``tools``/``tool_choice``."""
    if not tools or tool_choice == "none":
        return [], False
    if isinstance(tool_choice, Mapping):
        name = tool_choice.get("function", {}).get("name")
        return [t for t in tools if t.get("function", {}).get("name") == name], True
    return list(tools), tool_choice == "required"


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: object = "auto",
) -> str:
    """The ChatML prompt of ``messages``, ending with the assistant's header."""
    declared, required = offered_tools(tools, tool_choice)
    out: list[str] = []
    system_done = not declared
    for index, message in enumerate(messages):
        role = str(message.get("role", "user"))
        role = "system" if role == "developer" else role
        text = message_text(message.get("content"))
        header = role + _speaker(role, message.get("name"))
        if role == "system" and not system_done:
            text += _tools_section(declared, required)
            system_done = True
        for number, call in enumerate(message.get("tool_calls") or ()):
            function = call.get("function", {})
            field = f"messages.{index}.tool_calls.{number}.function.arguments"
            arguments = tool_call_arguments(function.get("arguments", "{}"), field)
            body = {"name": function.get("name"), "arguments": arguments}
            text += f"\n{CALL_OPEN}\n{json.dumps(body)}\n{CALL_CLOSE}"
        out.append(f"{START}{header}\n{text}{END}\n")
    if not system_done:
        out.insert(0, f"{START}system\n{_tools_section(declared, required).lstrip()}{END}\n")
    out.append(f"{START}assistant\n")
    return "".join(out)


def _speaker(role: str, name: object) -> str:
    """The turn header's `` name=...`` for a named system, user or assistant message (OpenAI's
    ChatML: ``<|im_start|>user name=alice``), so two speakers of one role stay two; empty
    without a name, so an unnamed conversation renders as it always did. A ``tool`` turn's
    name is the function's, not a speaker, and its header stays ``tool`` (what the simulated
    model reads as a tool result). The name is the client's text inside the header line: one
    that could end the line, the turn or the ``name=`` field (whitespace, ``<``, ``|``, ``>``,
    ``"``, slashes) is written as a JSON string with ``<`` and ``>`` escaped too, so no name
    can pass for a marker and two different names never render alike."""
    if role == "tool" or not isinstance(name, str) or not name:
        return ""
    if _PLAIN_NAME.fullmatch(name):
        return f" name={name}"
    quoted = json.dumps(name, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")
    return f" name={quoted}"


def tool_call_arguments(raw: object, field: str) -> object:
    """A tool call's ``arguments`` as a prompt shows them: the decoded value of a JSON text,
    the text as sent when it is not JSON, anything else as it is. Raises
    :class:`ArgumentsTooDeep` (naming ``field``) for JSON nested deeper than
    :data:`MAX_ARGUMENTS_DEPTH`, whether or not Python's decoder reaches its own recursion
    limit on it first."""
    if not isinstance(raw, str):
        return raw
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(field) from None
    except ValueError:
        return raw
    if _nested_deeper(value, MAX_ARGUMENTS_DEPTH):
        raise _too_deep(field)
    return value


def _too_deep(field: str) -> ArgumentsTooDeep:
    return ArgumentsTooDeep(
        f"{field}: JSON nested deeper than {MAX_ARGUMENTS_DEPTH} levels", field=field
    )


def _nested_deeper(value: object, limit: int) -> bool:
    """Whether decoded JSON ``value`` nests arrays and objects more than ``limit`` levels (the
    top one is level 1, as ``jsonguard.json_problem`` counts; iterative, since the value may
    be as deep as the decoder allowed)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        for child in container.values() if isinstance(container, dict) else container:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _tools_section(tools: Sequence[Mapping[str, Any]], required: bool) -> str:
    lines = "\n".join(json.dumps(dict(t), separators=(",", ":")) for t in tools)
    mark = "\ntool_choice: required" if required else ""
    return f"\n\n# Tools\n<tools>\n{lines}\n</tools>\n{TOOLS_HELP}{mark}"


def parse_tool_calls(text: str) -> list[ToolCall] | None:
    """The tool calls of an answer made only of ``<tool_call>`` blocks (and whitespace), or
    None when it is anything else (then it is plain text)."""
    calls: list[ToolCall] = []
    blocks = _call_blocks(text)
    if blocks is None:
        return None
    for data in blocks:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return None
        if _nested_deeper(data, MAX_ARGUMENTS_DEPTH + 1):  # ``json.dumps`` below recurses
            return None
        args = data.get("arguments", {})
        calls.append(ToolCall(data["name"], args if isinstance(args, str) else json.dumps(args)))
    return calls or None


def _call_blocks(text: str) -> list[object] | None:
    """The JSON value in each ``<tool_call>`` block of ``text``, in order, when ``text`` is
    made only of such blocks and whitespace; None for anything else. Each block's JSON is read
    as JSON (not up to the first ``</tool_call>``: an argument may hold that text)."""
    values: list[object] = []
    at, end = _after_space(text, 0), len(text)
    while at < end:
        if not text.startswith(CALL_OPEN, at):
            return None
        try:
            value, at = _JSON.raw_decode(text, _after_space(text, at + len(CALL_OPEN)))
        except (ValueError, RecursionError):  # the model's text, however deep: plain text
            return None
        at = _after_space(text, at)
        if not text.startswith(CALL_CLOSE, at):
            return None
        values.append(value)
        at = _after_space(text, at + len(CALL_CLOSE))
    return values


def _after_space(text: str, at: int) -> int:
    """The first position from ``at`` that is not whitespace (or the end)."""
    while at < len(text) and text[at].isspace():
        at += 1
    return at


class ToolCallFilter:
    """Holds back streamed text from the first ``<tool_call>`` (or a partial one at the end)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._held = ""
        self._holding = False
        #: text other than whitespace was sent: the answer is text whatever follows, as
        #: :func:`parse_tool_calls` reads the whole of an answer that is not streamed
        self._spoke = False

    def feed(self, text: str) -> str:
        """Text that can be sent now; the rest is held until :meth:`finish`."""
        if not self.enabled:
            return text
        if self._holding:
            self._held += text
            return ""
        buffer = self._held + text
        at = buffer.find(CALL_OPEN)
        if at >= 0:
            self._holding, self._held = True, buffer[at:]
            return self._sent(buffer[:at])
        for keep in range(min(len(CALL_OPEN) - 1, len(buffer)), 0, -1):
            if CALL_OPEN.startswith(buffer[-keep:]):
                self._held = buffer[-keep:]
                return self._sent(buffer[:-keep])
        self._held = ""
        return self._sent(buffer)

    def _sent(self, text: str) -> str:
        if not self._spoke and not text.isspace() and text:
            self._spoke = True
        return text

    def finish(self) -> tuple[str, list[ToolCall] | None]:
        """(text still to send, the tool calls) once the answer is complete."""
        held, self._held = self._held, ""
        if not self._holding or self._spoke:
            return held, None
        calls = parse_tool_calls(held)
        return ("", calls) if calls is not None else (held, None)
