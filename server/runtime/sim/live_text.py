"""Text for the wall-clock simulated runtime: prompt blocks, synthetic output, tool calls.

The simulated runtime has no tokenizer and no model, so it fakes both deterministically:

* **Tokens.** One token is :data:`CHARS_PER_TOKEN` characters. A prompt is cut into blocks of
  :data:`BLOCK_CHARS` characters whose keys form a hash chain, so two prompts share exactly
  their common whole blocks. The chain is seeded with the request's ``cache_namespace`` (the
  authenticated tenant) for every block outside the platform-public prefix, so prompts of two
  tenants never share a private block, whatever the client sends.
* **Output.** Lorem-ipsum words: a slice, starting at a place the prompt's hash picks, of one
  fixed random text, so the same prompt always gets the same answer (a slice, not a word drawn
  at a time: this runs for every call of the zero-cost benchmarks).
* **Tool calls (the convention).** The simulated model reads ChatML prompts with Hermes-style
  tool declarations (``<tools>`` ... ``</tools>`` in the system turn, one JSON function per
  line), which is what :mod:`agentconsole.server.live.prompt` renders. When tools are declared
  and the last turn before the assistant's is not a ``tool`` turn (or the prompt carries the
  line ``tool_choice: required``), it answers with one ``<tool_call>`` for the first declared
  function, with a placeholder value for each required parameter. So an agent loop gets a tool
  call first and a plain answer once the tool result is in the context.
* **Chat format.** :func:`chat_format` is the runtime's ``ChatFormat``: the built-in ChatML
  (so ``tool_choice`` required or a named function is honoured by the convention above), sized
  with :func:`count_tokens`.
"""

from __future__ import annotations

import json
import math
import random
import zlib
from collections.abc import Hashable, Mapping
from typing import Any

from agentconsole.kvtiers.node import Block
from agentconsole.scheduler.runtime import Prompt
from agentconsole.server.live.chatformat import ChatMLFormat

CHARS_PER_TOKEN = 4
BLOCK_CHARS = 256  # 64 tokens per block: coarse enough to keep the radix tree small
TOOLS_OPEN, TOOLS_CLOSE = "<tools>\n", "\n</tools>"
REQUIRED_MARK = "tool_choice: required"
TURN = "<|im_start|>"

_WORDS = (
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
    "dolore",
    "magna",
    "aliqua",
    "enim",
    "ad",
    "minim",
    "veniam",
    "quis",
    "nostrud",
    "exercitation",
    "ullamco",
    "laboris",
    "nisi",
    "aliquip",
    "ex",
    "ea",
    "commodo",
    "consequat",
)
#: the synthetic answers' text, in tokens of the simulated tokenizer's ``CHARS_PER_TOKEN``
#: characters (a word a token made an answer of N tokens count 1.6 N in the next prompt and in
#: the KV its program holds)
_LOREM_TEXT = "".join(" " + word for word in random.Random(0).choices(_WORDS, k=4096))
_LOREM = [
    _LOREM_TEXT[i : i + CHARS_PER_TOKEN]
    for i in range(0, len(_LOREM_TEXT) - CHARS_PER_TOKEN + 1, CHARS_PER_TOKEN)
]
#: the tokens an answer may open with: a word's start
_LOREM_STARTS = [i for i, piece in enumerate(_LOREM) if piece.startswith(" ")]


def count_tokens(text: str) -> int:
    """Tokens of ``text`` under the simulated tokenizer (at least 1 for non-empty text)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _sim_prompt(text: str, special: bool = False) -> Prompt:
    del special  # the simulated tokenizer adds no special tokens
    return Prompt(text, count_tokens(text))


def chat_format() -> ChatMLFormat:
    """The simulated model's chat format: ChatML sized by :func:`count_tokens`."""
    return ChatMLFormat(_sim_prompt, name="chatml (simulated tokens)")


def prompt_blocks(prompt: str, namespace: str, public_chars: int = 0) -> list[Block]:
    """The prompt as prefix-index blocks; see the module docstring for the keying."""
    return _chain([], ("public",), prompt, 0, namespace, public_chars)


def answered_blocks(
    blocks: list[Block], prompt: str, answer: str, namespace: str, public_chars: int = 0
) -> list[Block]:
    """The blocks of ``prompt`` followed by ``answer``, ``blocks`` being ``prompt``'s: its
    whole blocks as they are, the chain hashed on from there (the text an agent's next prompt
    repeats, the answer as its assistant turn)."""
    whole = len(prompt) // BLOCK_CHARS
    head = blocks[:whole]
    key: Hashable = head[-1].key if head else ("public",)
    start = whole * BLOCK_CHARS
    return _chain(head, key, prompt[start:] + answer, start, namespace, public_chars)


def _chain(
    blocks: list[Block], key: Hashable, text: str, offset: int, namespace: str, public_chars: int
) -> list[Block]:
    """``blocks`` extended by ``text`` (starting ``offset`` characters into the prompt) cut
    into blocks whose keys continue the hash chain from ``key``."""
    for start in range(0, len(text), BLOCK_CHARS):
        chunk = text[start : start + BLOCK_CHARS]
        public = offset + start + len(chunk) <= public_chars
        key = hash((key, chunk)) if public else hash((key, namespace, chunk))
        blocks.append(Block(key, count_tokens(chunk), public))
    return blocks


def _placeholder(schema: Mapping[str, Any]) -> object:
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    values: dict[str, object] = {
        "string": "sim",
        "integer": 0,
        "number": 0,
        "boolean": False,
        "array": [],
        "object": {},
        "null": None,
    }
    return values.get(kind if isinstance(kind, str) else "string", "sim")


def _declared_tools(prompt: str) -> list[dict[str, Any]]:
    start = prompt.rfind(TOOLS_OPEN)
    if start < 0:
        return []
    end = prompt.find(TOOLS_CLOSE, start)
    if end < 0:
        return []
    tools = []
    for line in prompt[start + len(TOOLS_OPEN) : end].splitlines():
        try:
            spec = json.loads(line)
        except ValueError:
            continue
        function = spec.get("function", spec) if isinstance(spec, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tools.append(function)
    return tools


def tool_call_text(prompt: str) -> str | None:
    """The ``<tool_call>`` the simulated model answers ``prompt`` with, or None (plain text)."""
    tools = _declared_tools(prompt)
    if not tools:
        return None
    turns = prompt.rsplit(TURN, 2)
    last_role = turns[-2].split("\n", 1)[0].strip() if len(turns) == 3 else ""
    if last_role == "tool" and REQUIRED_MARK not in prompt:
        return None
    function = tools[0]
    params = function.get("parameters")
    props = params.get("properties", {}) if isinstance(params, dict) else {}
    required = params.get("required", []) if isinstance(params, dict) else []
    arguments = {
        name: _placeholder(props.get(name, {}) if isinstance(props, dict) else {})
        for name in required
        if isinstance(name, str)
    }
    call = json.dumps({"name": function["name"], "arguments": arguments})
    return f"<tool_call>\n{call}\n</tool_call>"


def output_pieces(prompt: str, tokens: int, *, allow_tool_call: bool = True) -> list[str]:
    """The synthetic answer to ``prompt`` as ``tokens`` token texts, or fewer for a tool call
    that fits in ``tokens`` (its natural length). Deterministic."""
    call = tool_call_text(prompt) if allow_tool_call else None
    if call is not None:
        pieces = [call[i : i + CHARS_PER_TOKEN] for i in range(0, len(call), CHARS_PER_TOKEN)]
        return pieces[:tokens]
    start = _LOREM_STARTS[zlib.crc32(prompt[-BLOCK_CHARS:].encode()) % len(_LOREM_STARTS)]
    pieces = _LOREM[start : start + tokens]
    while len(pieces) < tokens:
        pieces += _LOREM[: tokens - len(pieces)]
    if pieces:
        pieces[0] = pieces[0].lstrip()
    return pieces


def natural_length(prompt: str, lo: int = 16, hi: int = 64) -> int:
    """How many tokens the simulated model wants to say to ``prompt`` (tool call or text)."""
    call = tool_call_text(prompt)
    if call is not None:
        return count_tokens(call)
    return lo + zlib.crc32(prompt.encode()) % (hi - lo + 1)
