"""Tool-wait retention on SGLang's real radix cache (the ``agentconsole`` eviction strategy).

Two programs leave a ~1000-token context each; only the first is kept (``cache_hint(KEEP)``)
although it is the *older* one, which plain LRU evicts first. Then unrelated work overflows
the 4096-token KV pool. The kept program's next call hits its whole context; the other's
context is gone (the negative control: same size, same pressure, more recently used)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentconsole.scheduler.runtime import CacheAction
from tests.sglang.conftest import ENGINE_MAX_TOTAL_TOKENS
from tests.sglang.helpers import consume, request, ticket, words

pytestmark = pytest.mark.sglang
CONTEXT = 1000


async def _call(rt: Any, program: str, tenant: str, prompt: str) -> int:
    out = await consume(rt, request(ticket(program, tenant=tenant), prompt, 8))
    return int(out.result.cached_tokens)


async def _scenario(rt: Any) -> tuple[int, int, dict[str, int]]:
    kept = words(CONTEXT, rt, seed=21)
    other = words(CONTEXT, rt, seed=22)
    await _call(rt, "keep-me", "ret-a", kept)
    await rt.cache_hint("keep-me", CacheAction.KEEP, 120.0)
    await _call(rt, "forget-me", "ret-b", other)
    filler = 0
    for seed in range(23, 30):  # well over the pool: everything unkept must go
        await _call(rt, f"filler-{seed}", "ret-c", words(900, rt, seed=seed))
        filler += 900
    placement = {p: tiers["hbm"] for p, tiers in rt.snapshot().placement.items()}
    assert filler > ENGINE_MAX_TOTAL_TOKENS
    kept_hit = await _call(rt, "keep-me", "ret-a", kept + " and the tool said yes")
    other_hit = await _call(rt, "forget-me", "ret-b", other + " and the tool said yes")
    return kept_hit, other_hit, placement


def test_kept_context_survives_pressure_that_evicts_an_unkept_one(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    kept_hit, other_hit, placement = run(_scenario(rt))
    assert kept_hit >= CONTEXT - 5
    assert other_hit < 50
    assert placement.get("keep-me", 0) >= CONTEXT
