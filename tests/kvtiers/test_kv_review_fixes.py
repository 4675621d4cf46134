"""The index's side of the KV review (items 4-6): a released retention ranks by last access,
an all-or-nothing eviction evicts nothing it cannot finish, and a reload swaps with its victim
instead of dropping it."""

from __future__ import annotations

from agentconsole.kvtiers import Block, PrefixIndex, Tier, TierModel
from agentconsole.kvtiers.node import Node

HBM, DRAM = Tier.HBM, Tier.DRAM


def make(hbm: int, dram: int, strategy: str = "retention") -> PrefixIndex:
    model = TierModel.build(kv_bytes_per_token=1000.0, hbm_tokens=hbm, dram_tokens=dram)
    return PrefixIndex(model, strategy)


def _dead(node: Node) -> bool:
    return node.dead


def test_a_released_retention_ranks_by_last_access_not_as_used_at_the_release() -> None:
    ix = make(hbm=40, dram=0)
    a = ix.insert("T", [Block("a", 20)], 0.0).path
    ix.retain(a, until=10.0, now=0.0)
    b = ix.insert("T", [Block("b", 20)], 2.0).path  # used after a's last access
    assert ix.end_retention(a, 4.0) == 20
    ix.make_room(HBM, 20, 5.0)
    assert _dead(a[0])  # a was last used at 0, b at 2: LRU takes a
    assert not _dead(b[0])
    ix.check_integrity()


def test_a_lapsed_retention_still_ages_from_its_deadline() -> None:
    ix = make(hbm=40, dram=0)
    a = ix.insert("T", [Block("a", 20)], 0.0).path
    ix.retain(a, until=3.0, now=0.0)
    assert ix.end_retention(a, 4.0) == 0  # nothing left to end
    assert a[0].retain_until == 3.0


def test_an_all_or_nothing_eviction_that_cannot_finish_evicts_nothing() -> None:
    ix = make(hbm=100, dram=0)
    a = ix.insert("T", [Block("a", 50)], 0.0).path
    b = ix.insert("T", [Block("b", 40)], 1.0).path
    ix.retain(b, until=100.0, now=1.0)
    gated = ix.make_room(HBM, 70, 10.0, max_priority=10.0, all_or_nothing=True)
    assert not gated.ok
    assert (gated.freed, gated.moves) == (0, [])
    assert not _dead(a[0])
    # the same gate makes a room it can: the unretained one goes
    assert ix.make_room(HBM, 60, 10.0, max_priority=10.0, all_or_nothing=True).ok
    assert _dead(a[0])
    assert not _dead(b[0])
    ix.check_integrity()


def test_an_all_or_nothing_eviction_takes_a_parent_once_its_children_are_planned() -> None:
    ix = make(hbm=60, dram=0)
    path = ix.insert("T", [Block("p", 20), Block("c", 20)], 0.0).path
    kept = ix.insert("T", [Block("k", 20)], 1.0).path
    ix.retain(kept, until=100.0, now=1.0)
    result = ix.make_room(HBM, 40, 5.0, max_priority=5.0, all_or_nothing=True)
    assert result.ok
    assert [m.node.key for m in result.moves] == ["c", "p"]
    assert all(_dead(n) for n in path)
    ix.check_integrity()


def test_a_reload_swaps_with_its_victim_instead_of_dropping_it() -> None:
    ix = make(hbm=10, dram=10, strategy="lru")
    victim = ix.insert("T", [Block("v", 10)], 0.0).path
    slow = ix.insert("T", [Block("s", 10)], 1.0, DRAM).path
    ix.lock(slow)  # a call about to use it
    result = ix.move(slow, HBM, 2.0)
    assert result.ok
    assert slow[0].tier is HBM
    assert not _dead(victim[0])
    assert victim[0].tier is DRAM  # it took the room the reload left
    assert ix.used(DRAM) == 10
    ix.check_integrity()


def test_a_promotion_with_room_is_all_or_nothing() -> None:
    ix = make(hbm=30, dram=20, strategy="retention")
    other = ix.insert("T", [Block("o", 10)], 0.0).path
    kept = ix.insert("T", [Block("k", 10)], 0.5).path
    ix.retain(kept, until=100.0, now=0.5)
    slow = ix.insert("T", [Block("s", 10)], 1.0, DRAM).path
    # s and 15 tokens more need 25 of 30 HBM; only o (10) is under the gate, 10 free
    refused = ix.promote(slow, HBM, 2.0, room=15, max_priority=2.0)
    assert not refused.ok
    assert refused.moves == []
    assert (other[0].tier, slow[0].tier) == (HBM, DRAM)
    done = ix.promote(slow, HBM, 2.0, room=10, max_priority=2.0)
    assert done.ok
    assert (other[0].tier, slow[0].tier, kept[0].tier) == (DRAM, HBM, HBM)
    assert ix.free(HBM) >= 10
    ix.check_integrity()


def test_a_promotion_never_makes_its_room_of_a_node_it_was_given_that_is_there_already() -> None:
    """``promote`` pins what it is given that sits on the tier already: a caller passing a
    whole set of nodes it is about to use (not only the slower ones) must not see one of them
    evicted to make room for another. The simulator's admission never passes such a node (it
    sends the slower part of a path it has locked), so only this reaches the pin."""
    ix = make(hbm=10, dram=20, strategy="lru")
    there = ix.insert("T", [Block("t", 10)], 0.0).path  # fills HBM, unlocked
    slow = ix.insert("T", [Block("s", 10)], 1.0, DRAM).path
    refused = ix.promote([there[0], slow[0]], HBM, 2.0)
    assert not refused.ok
    assert refused.moves == []
    assert (there[0].tier, slow[0].tier) == (HBM, DRAM)
    assert there[0].lock_count == 0  # the pin is undone
    # given the slower node alone, the same promotion swaps the other one out
    done = ix.promote(slow, HBM, 3.0)
    assert done.ok
    assert (there[0].tier, slow[0].tier) == (DRAM, HBM)
    ix.check_integrity()


def test_an_offload_never_pushes_out_another_programs_retained_offload() -> None:
    """B's tool-wait offload found DRAM full of A's offloaded context, retained until A is
    back: it evicted A's (1.6 M retained tokens dropped in a seed-mix run with a small host
    tier). B's context now stays on HBM, and A's is kept."""
    index = PrefixIndex(
        TierModel.build(kv_bytes_per_token=1.0, hbm_tokens=100, dram_tokens=50), "retention"
    )
    a = index.insert("A", [Block("pA/ctx", 40)], 1.0, owner="pA").path
    index.move(a, Tier.DRAM, 1.0)
    index.retain(a, 100.0, 1.0)
    b = index.insert("B", [Block("pB/ctx", 30)], 2.0, owner="pB").path
    moved = index.move(b, Tier.DRAM, 2.0)
    assert (a[0].dead, a[0].tier) == (False, Tier.DRAM)
    assert (moved.moved_tokens, b[0].tier) == (0, Tier.HBM)
