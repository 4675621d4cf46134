"""Synthetic prompt text of a trace node: deterministic filler per context segment, so that
calls sharing context segments share the prompt's text prefix (and so the KV prefix)."""

from __future__ import annotations

import hashlib
from typing import Any

from agentconsole.sample_traces import LLMNode, TraceProgram, context_segments

#: The simulated runtime counts 4 characters as one token; real tokenizers come close on
#: this filler (short lowercase hex words).
CHARS_PER_TOKEN = 4


def segment_text(key: str, tokens: int, token_scale: float) -> str:
    """About ``tokens * token_scale`` tokens of text, the same for the same ``key``."""
    chars = max(round(tokens * token_scale), 1) * CHARS_PER_TOKEN
    seed = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    words = " ".join(seed[i : i + 4] for i in range(0, len(seed), 4)) + " "
    return (words * (chars // len(words) + 1))[:chars]


def chat_body(
    program: TraceProgram,
    node: LLMNode,
    *,
    model: str,
    token_scale: float,
    max_output_tokens: int | None,
) -> dict[str, Any]:
    """An OpenAI chat request for ``node``: the program's prefix as the system message, the
    ancestors' segments and the node's own prompt as the user message; ``max_tokens`` is the
    recorded output length (and ``ignore_eos`` makes the model produce all of it)."""
    segments = context_segments(program, node.id)
    prefix_ids = {p.id for p in program.prefix}
    system = "".join(
        segment_text(s.key, s.tokens, token_scale) for s in segments if s.key in prefix_ids
    )
    user = "".join(
        segment_text(s.key, s.tokens, token_scale) for s in segments if s.key not in prefix_ids
    )
    output = (
        node.output_tokens
        if max_output_tokens is None
        else min(node.output_tokens, max_output_tokens)
    )
    messages = [{"role": "user", "content": user or "continue"}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return {
        "model": model,
        "messages": messages,
        "max_tokens": max(output, 1),
        "ignore_eos": True,
        "stream": False,
    }
