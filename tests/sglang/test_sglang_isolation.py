"""Tenant isolation of SGLang's prefix cache through ``cache_salt`` (seed section 13)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.sglang.helpers import consume, request, ticket, words

pytestmark = pytest.mark.sglang
PREFIX = 300


async def _cached(rt: Any, tenant: str, prompt: str, public_chars: int = 0) -> int:
    t = ticket(f"iso-{tenant}", tenant=tenant)
    out = await consume(rt, request(t, prompt, 4, public_prefix_chars=public_chars))
    return int(out.result.cached_tokens)


def test_shared_prefix_hits_within_a_tenant_and_never_across(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    prefix = words(PREFIX, rt, seed=11)
    run(_cached(rt, "iso-a", prefix + " first question"))
    same_tenant = run(_cached(rt, "iso-a", prefix + " second question"))
    other_tenant = run(_cached(rt, "iso-b", prefix + " third question"))
    assert same_tenant >= PREFIX - 5  # positive control: the cache works
    assert other_tenant == 0


def test_a_wholly_public_prompt_is_shared_a_partly_public_one_is_not(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    public = words(PREFIX, rt, seed=12)
    run(_cached(rt, "pub-a", public, public_chars=len(public)))
    wholly = public + " and more"
    shared = run(_cached(rt, "pub-b", wholly, public_chars=len(wholly)))
    partly = run(_cached(rt, "pub-c", public + " my secret", public_chars=len(public)))
    assert shared >= PREFIX - 5
    # salting is per request: a prompt with a private part is salted with its tenant
    assert partly == 0
