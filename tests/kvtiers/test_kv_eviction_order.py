"""Eviction order: smallest strategy priority first among unlocked leaves of the tier."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentconsole.kvtiers import Block, PrefixIndex, Tier, TierModel


@given(
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    touches=st.lists(st.integers(0, 11), max_size=20),
    retains=st.lists(st.tuples(st.integers(0, 11), st.floats(0, 60)), max_size=5),
    holds=st.lists(st.integers(0, 11), max_size=4),
    strategy=st.sampled_from(["lru", "retention"]),
    need=st.integers(1, 60),
)
def test_evicts_in_priority_order(
    sizes: list[int],
    touches: list[int],
    retains: list[tuple[int, float]],
    holds: list[int],
    strategy: str,
    need: int,
) -> None:
    model = TierModel.build(kv_bytes_per_token=1.0, hbm_tokens=sum(sizes))
    ix = PrefixIndex(model, strategy)
    ctx = [[Block(i, size)] for i, size in enumerate(sizes)]
    now = 0.0
    for blocks in ctx:
        now += 1.0
        ix.insert("T", blocks, now)
    for i in touches:
        now += 1.0
        ix.match("T", ctx[i % len(ctx)], now)
    for i, ttl in retains:
        ix.retain(ix.peek("T", ctx[i % len(ctx)]).path, now + ttl, now)
    for i in holds:
        ix.hold(ix.peek("T", ctx[i % len(ctx)]).path)
    nodes = list(ix.nodes())
    key = ix.strategy.priority
    expected: list[object] = []
    freed = 0
    for node in sorted(nodes, key=lambda n: (key(n), n.stamp)):
        if freed >= need:
            break
        expected.append(node.key)
        freed += node.tokens
    result = ix.evict(Tier.HBM, need, now + 1.0)
    assert [m.node.key for m in result.moves] == expected
    assert all(m.dst is None for m in result.moves)
    assert result.ok == (need <= sum(sizes))
    ix.check_integrity()
