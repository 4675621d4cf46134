"""Mid-prompt insertions: a call that repeats its program's previous prompt with new tokens
put in the middle (tool results between a fixed system prefix and the history tail).

A prefix cache reuses a prompt only up to its first changed token, so everything after an
insertion is prefilled again although the engine computed it for the previous call: that is
the *lost reuse*. Appending the new tokens at the end instead would have kept it.

Detection, at a call's end, against the last prompt of the same program (held in memory only,
:class:`PromptMemory`; never stored):

1. the common prefix ``p``: compared a block of :data:`BLOCK_TOKENS` at a time, then refined to
   the unit (token, or character on the simulator) inside the first differing block;
2. the previous prompt's continuation ``prev[p:]`` found again further on: its first
   :data:`MIN_REUSED_TOKENS` tokens searched for in ``cur[p + 1:]`` (a pure insertion, the
   tail may have grown after it), else the longest common suffix (the middle was replaced);
3. an insertion when ``p >= MIN_PREFIX_TOKENS`` (the calls share a real prefix: the same
   program's context, not two unrelated prompts), the repeated run is at least
   ``MIN_REUSED_TOKENS`` long (shorter runs, such as the chat template's closing tokens, are
   chance) and the inserted middle is not empty.

Thresholds: 256 tokens each (four 64-token cache blocks): enough to rule out coincidences of
template markup, small enough that a system prompt of a few paragraphs counts.

Units: the runtime's token ids when the server tokenized the prompt (SGLang), else the text's
characters, four to a token (the simulator's count, ``chatformat.CHARS_PER_TOKEN``); positions
and lengths are reported in tokens either way.

Lost reuse is the part of the repeated run the engine actually prefilled: its overlap with the
call's uncached tokens ``[cached_tokens, prompt_tokens)``, so a run the engine somehow served
from cache (or a call that was mostly cached anyway) counts only what it cost.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from agentconsole.server.live.chatformat import CHARS_PER_TOKEN
from agentconsole.server.store.prompt_blocks import BLOCK_TOKENS

MIN_PREFIX_TOKENS = 256
MIN_REUSED_TOKENS = 256
#: Units (tokens or characters) the memory holds over all programs: 4M, at most 32 MiB of
#: token ids (8 bytes each) or 4 MiB of simulator text; the least recent programs go first.
MEMORY_UNITS = 4_000_000
#: The longest prompt remembered (units); a longer one is cut to its head.
MAX_PROMPT_UNITS = 1 << 19

#: a prompt as comparable units: token ids, or text on the simulator
Units: TypeAlias = "array[int] | str"


@dataclass(frozen=True, slots=True)
class Insertion:
    """One call's insertion, in tokens."""

    at_token: int
    inserted_tokens: int
    reused_tokens: int
    lost_reuse_tokens: int


def units_of(prompt_ids: Sequence[int] | None, text: str) -> tuple[Units, int]:
    """The prompt's comparable units and how many of them make a token."""
    if prompt_ids is not None:
        return array("q", prompt_ids[:MAX_PROMPT_UNITS]), 1
    return text[:MAX_PROMPT_UNITS], CHARS_PER_TOKEN


def common_prefix(a: Units, b: Units) -> int:
    """Length of the common prefix: block by block (one C-level comparison each), then unit
    by unit in the first block that differs."""
    n = min(len(a), len(b))
    start = 0
    while start < n and a[start : start + BLOCK_TOKENS] == b[start : start + BLOCK_TOKENS]:
        start += BLOCK_TOKENS
    start = min(start, n)
    while start < n and a[start] == b[start]:
        start += 1
    return start


def _common_suffix(a: Units, b: Units, bound: int) -> int:
    """Length of the common suffix, at most ``bound``: block by block, then unit by unit."""
    k = 0
    la, lb = len(a), len(b)
    while k + BLOCK_TOKENS <= bound and (
        a[la - k - BLOCK_TOKENS : la - k] == b[lb - k - BLOCK_TOKENS : lb - k]
    ):
        k += BLOCK_TOKENS
    while k < bound and a[la - k - 1] == b[lb - k - 1]:
        k += 1
    return k


def _find(hay: Units, needle: Units, start: int) -> int:
    """First index >= ``start`` where ``needle`` occurs in ``hay`` (-1 if none)."""
    if isinstance(hay, str):
        return hay.find(str(needle), start)
    assert isinstance(needle, array)
    raw, pattern, width = hay.tobytes(), needle.tobytes(), hay.itemsize
    at = start * width
    while (found := raw.find(pattern, at)) >= 0:
        if found % width == 0:  # a match across two ids' bytes is no match
            return found // width
        at = found + 1
    return -1


def detect(
    prev: Units, cur: Units, per_token: int, *, prompt_tokens: int, cached_tokens: int
) -> Insertion | None:
    """The insertion that turns ``prev`` into ``cur`` (module docstring), or None."""
    p = common_prefix(prev, cur)
    need = MIN_REUSED_TOKENS * per_token
    if p < MIN_PREFIX_TOKENS * per_token or len(prev) - p < need:
        return None  # too little shared prefix, or an append (nothing after p to repeat)
    resumed = _find(cur, prev[p : p + need], p + 1)
    if resumed >= 0:
        run = common_prefix(prev[p:], cur[resumed:])
    else:  # the middle was replaced: the tail still repeats
        run = _common_suffix(prev, cur, min(len(prev), len(cur)) - p)
        resumed = len(cur) - run
        if run < need or resumed <= p:
            return None
    first, end = -(-resumed // per_token), (resumed + run) // per_token
    lost = max(0, min(end, prompt_tokens) - max(first, cached_tokens))
    return Insertion(
        at_token=p // per_token,
        inserted_tokens=max(1, (resumed - p) // per_token),
        reused_tokens=max(0, end - first),
        lost_reuse_tokens=lost,
    )


class PromptMemory:
    """The last prompt of each live program, as units, in memory only (never stored); at
    most ``budget`` units over all programs, the least recently called dropped first."""

    def __init__(self, budget: int = MEMORY_UNITS) -> None:
        self.budget = budget
        self._held = 0
        self._last: OrderedDict[str, Units] = OrderedDict()

    def observe(
        self,
        program_id: str,
        prompt: tuple[Sequence[int] | None, str],
        *,
        prompt_tokens: int,
        cached_tokens: int,
    ) -> Insertion | None:
        """Compare ``prompt`` (token ids or None, text) with the program's previous one,
        remember it in its place and return the insertion found, if any."""
        units, per_token = units_of(*prompt)
        prev = self._last.get(program_id)
        found = None
        if prev is not None and type(prev) is type(units):
            found = detect(
                prev, units, per_token, prompt_tokens=prompt_tokens, cached_tokens=cached_tokens
            )
        self.forget(program_id)
        self._last[program_id] = units
        self._held += len(units)
        while self._held > self.budget and self._last:
            _, dropped = self._last.popitem(last=False)
            self._held -= len(dropped)
        return found

    def forget(self, program_id: str) -> None:
        """Drop the program's prompt (it ended and left memory)."""
        prev = self._last.pop(program_id, None)
        if prev is not None:
            self._held -= len(prev)

    @property
    def held_units(self) -> int:
        return self._held
