"""Deterministic prompt text of an exact token count, for replaying traces on a real model.

A trace gives token counts per context segment (prefix ids, ``program/node/prompt|out|result``);
a real engine needs text. :class:`TextBook` turns a segment key and a size into text that the
model's tokenizer encodes to exactly that many tokens, always the same text for the same key,
so segments shared in the trace are shared prefixes in the engine's radix cache too.

Why this is exact: every piece is one word with a leading space, and the byte-level BPE
pre-tokenizer splits on that space, so token counts of pieces add up and a segment's count
does not depend on what precedes it. Words are drawn from a pool tokenized once, then the
segment is filled with single-token words at the end to hit the count exactly.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class TextBook:
    """Text per (segment key, tokens), cached; ``tokenizer`` has ``encode(text,
    add_special_tokens=False)`` (a Hugging Face tokenizer)."""

    def __init__(self, tokenizer: Any, *, seed: int = 0, pool: int = 4000) -> None:
        self._tok = tokenizer
        self._seed = seed
        rnd = random.Random(seed)
        words: dict[str, int] = {}
        while len(words) < pool:
            w = " " + "".join(rnd.choice(_LETTERS) for _ in range(rnd.randint(2, 9)))
            words.setdefault(w, self.count(w))
        self._words = sorted(words.items())
        self._ones = [w for w, n in self._words if n == 1]
        if not self._ones:
            raise ValueError("the tokenizer has no single-token words: cannot size text exactly")
        self._cache: dict[tuple[str, int], str] = {}

    def count(self, text: str) -> int:
        """Tokens of ``text`` (no special tokens)."""
        return len(self._tok.encode(text, add_special_tokens=False))

    def text(self, key: str, tokens: int) -> str:
        """Text of exactly ``tokens`` tokens for ``key`` (empty for 0); the same every time."""
        if tokens <= 0:
            return ""
        cached = self._cache.get((key, tokens))
        if cached is not None:
            return cached
        digest = hashlib.sha256(f"{self._seed}:{key}".encode()).digest()
        rnd = random.Random(int.from_bytes(digest[:8], "big"))
        parts: list[str] = []
        left = tokens
        while left > 3:
            word, n = self._words[rnd.randrange(len(self._words))]
            if n <= left - 1:  # keep room to finish with single-token words
                parts.append(word)
                left -= n
        parts.extend(rnd.choice(self._ones) for _ in range(left))
        text = "".join(parts)
        self._cache[(key, tokens)] = text
        return text
