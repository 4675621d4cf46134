"""Mid-prompt insertion detection (``server/live/insertions.py``) on token ids and on text."""

from __future__ import annotations

import random

from agentconsole.server.live.insertions import Insertion, PromptMemory, detect, units_of

_rng = random.Random(7)


def _ids(n: int) -> list[int]:
    return [_rng.randrange(1, 150_000) for _ in range(n)]


SYSTEM, HISTORY, TOOL = _ids(300), _ids(400), _ids(37)


def _observe(memory: PromptMemory, ids: list[int], cached: int = 0) -> Insertion | None:
    return memory.observe("p", (ids, ""), prompt_tokens=len(ids), cached_tokens=cached)


def test_an_insertion_between_prefix_and_tail_is_found_to_the_token() -> None:
    memory = PromptMemory()
    assert _observe(memory, SYSTEM + HISTORY) is None
    found = _observe(memory, SYSTEM + TOOL + HISTORY + _ids(20), cached=256)
    assert found is not None
    assert (found.at_token, found.inserted_tokens, found.lost_reuse_tokens) == (300, 37, 400)


def test_appends_repeats_and_short_prefixes_are_no_insertions() -> None:
    memory = PromptMemory()
    _observe(memory, SYSTEM + HISTORY)
    assert _observe(memory, SYSTEM + HISTORY + TOOL) is None  # appended
    assert _observe(memory, SYSTEM + HISTORY + TOOL) is None  # the same prompt again
    short = SYSTEM[:100] + HISTORY
    _observe(memory, short)
    assert _observe(memory, SYSTEM[:100] + TOOL + HISTORY) is None  # prefix under 256


def test_a_replaced_middle_counts_and_lost_reuse_is_only_what_was_prefilled() -> None:
    prev, cur = SYSTEM + _ids(50) + HISTORY, SYSTEM + _ids(80) + HISTORY
    units = units_of(prev, "")[0], units_of(cur, "")[0]
    found = detect(*units, 1, prompt_tokens=len(cur), cached_tokens=500)
    assert found is not None
    assert found.inserted_tokens == 80
    assert found.reused_tokens == 400
    assert found.lost_reuse_tokens == len(cur) - 500  # the engine had cached the rest


def test_text_counts_four_characters_a_token_whatever_the_insertion_length() -> None:
    system = "".join(chr(97 + _rng.randrange(26)) for _ in range(1200))
    history = "".join(chr(97 + _rng.randrange(26)) for _ in range(2000))
    found = detect(
        system + history, system + "X" * 601 + history, 4, prompt_tokens=951, cached_tokens=0
    )
    assert found is not None
    assert (found.at_token, found.inserted_tokens, found.lost_reuse_tokens) == (300, 150, 499)


def test_memory_stays_within_its_budget() -> None:
    memory = PromptMemory(budget=1000)
    for n in range(5):
        memory.observe(f"p{n}", (SYSTEM, ""), prompt_tokens=300, cached_tokens=0)
    assert memory.held_units <= 1000
    memory.forget("p4")
    assert memory.held_units <= 700
