"""Unit tests of the tenant-scoped prefix index: hits, namespacing, locks, eviction, moves."""

from __future__ import annotations

import pytest

from agentconsole.kvtiers import (
    Block,
    PrefixIndex,
    Tier,
    TierModel,
    available_strategies,
    get_strategy,
)
from agentconsole.kvtiers.eviction import LRU, register_strategy
from agentconsole.kvtiers.node import Node

HBM, DRAM, DISK = Tier.HBM, Tier.DRAM, Tier.DISK


def make(hbm: int = 100, dram: int = 100, disk: int = 0, **kw: object) -> PrefixIndex:
    model = TierModel.build(
        kv_bytes_per_token=1000.0, hbm_tokens=hbm, dram_tokens=dram, disk_tokens=disk
    )
    return PrefixIndex(model, **kw)  # type: ignore[arg-type]


SYS = Block("sys", 40, public=True)


def seq(*blocks: tuple[str, int]) -> list[Block]:
    return [Block(k, t) for k, t in blocks]


def test_insert_counts_new_tokens_once() -> None:
    ix = make()
    ctx = [SYS, *seq(("a", 10), ("b", 5))]
    assert ix.insert("T", ctx, 0.0).new_tokens == 55
    assert ix.insert("T", ctx, 1.0).new_tokens == 0
    grown = [*ctx, Block("c", 7)]
    result = ix.insert("T", grown, 2.0, owner="p1")
    assert (result.new_tokens, result.complete, len(result.path)) == (7, True, 4)
    assert result.path[-1].owner == "p1"
    assert ix.used(HBM) == 62
    assert ix.counters.inserted_tokens == 62
    ix.check_integrity()


def test_match_counts_hit_tokens_not_requests() -> None:
    ix = make()
    ctx = [SYS, *seq(("a", 10))]
    ix.insert("T", ctx, 0.0)
    found = ix.match("T", [*ctx, Block("new", 30)], 1.0)
    assert (found.hit_tokens, found.miss_tokens, found.requested_tokens) == (50, 30, 80)
    assert found.tokens_on(HBM) == 50
    ix.match("T", [SYS], 2.0)
    assert ix.counters.hit_tokens == [90, 0, 0]
    assert ix.counters.lookup_tokens == 120
    assert ix.counters.matches == 2
    assert ix.counters.hit_ratio == pytest.approx(90 / 120)


def test_peek_changes_nothing() -> None:
    ix = make()
    ix.insert("T", [SYS], 0.0)
    found = ix.peek(
        "T",
        [SYS],
    )
    assert found.hit_tokens == 40
    assert found.path[0].last_access == 0.0
    assert ix.counters.matches == 0


def test_tenants_never_match_each_others_private_blocks() -> None:
    ix = make()
    ix.insert("A", seq(("x", 10), ("y", 10)), 0.0)
    assert ix.match("B", seq(("x", 10), ("y", 10)), 1.0).hit_tokens == 0
    ix.insert("A", [SYS, *seq(("x", 10))], 0.0)
    found = ix.match("B", [SYS, *seq(("x", 10))], 1.0)
    assert found.hit_tokens == 40  # the public prefix only
    assert ix.match("A", [SYS, *seq(("x", 10))], 1.0).hit_tokens == 50
    ix.check_integrity()


def test_public_prefix_is_shared_across_tenants() -> None:
    ix = make()
    ix.insert("A", [SYS, *seq(("a", 10))], 0.0)
    assert ix.insert("B", [SYS, *seq(("b", 10))], 1.0).new_tokens == 10
    assert ix.used(HBM) == 60


def test_public_block_after_a_private_one_is_private() -> None:
    ix = make()
    late_public = Block("q", 5, public=True)
    ix.insert("A", [Block("p", 5), late_public], 0.0)
    assert ix.match("B", [Block("p", 5), late_public], 1.0).hit_tokens == 0
    assert ix.match("B", [late_public], 1.0).hit_tokens == 0
    assert ix.match("A", [Block("p", 5), late_public], 1.0).hit_tokens == 10


def test_same_key_with_other_size_is_an_error() -> None:
    ix = make()
    ix.insert("T", seq(("a", 10)), 0.0)
    with pytest.raises(ValueError, match="tokens"):
        ix.match("T", seq(("a", 11)), 1.0)
    with pytest.raises(ValueError, match="tokens"):
        ix.insert("T", seq(("a", 11)), 1.0)


def test_insert_truncates_instead_of_exceeding_capacity() -> None:
    ix = make(hbm=30)
    result = ix.insert("T", seq(("a", 10), ("b", 15), ("c", 10)), 0.0)
    assert (result.new_tokens, result.complete, len(result.path)) == (25, False, 2)
    assert ix.used(HBM) == 25
    assert ix.reserve(HBM, 5)
    assert not ix.insert("T", seq(("a", 10), ("b", 15), ("c", 1)), 1.0).complete


def test_make_room_evicts_least_recently_used_leaf_and_demotes() -> None:
    ix = make(hbm=60, dram=100)
    ix.insert("T", seq(("old", 20)), 0.0, owner="p-old")
    ix.insert("T", seq(("mid", 20)), 1.0)
    ix.insert("T", seq(("new", 20)), 2.0)
    ix.match("T", seq(("old", 20)), 3.0)  # now "mid" is the least recent
    result = ix.make_room(HBM, 20, 4.0)
    assert result.ok
    assert result.freed == 20
    assert [(m.node.key, m.src, m.dst) for m in result.moves] == [("mid", HBM, DRAM)]
    assert ix.peek("T", seq(("mid", 20))).tokens_by_tier == [0, 20, 0]
    assert result.demoted_tokens == 20
    assert result.dropped_tokens == 0
    assert ix.counters.evicted_tokens[HBM] == 20
    ix.check_integrity()


def test_make_room_does_nothing_when_free_suffices() -> None:
    ix = make(hbm=60)
    ix.insert("T", seq(("a", 20)), 0.0)
    result = ix.make_room(HBM, 40, 1.0)
    assert result.ok
    assert result.freed == 0
    assert not result.moves


def test_without_demotion_eviction_drops() -> None:
    ix = make(hbm=40, demote=False)
    ix.insert("T", seq(("a", 20)), 0.0, owner="pa")
    ix.insert("T", seq(("b", 20)), 1.0)
    result = ix.make_room(HBM, 20, 2.0)
    assert [(m.node.key, m.dst) for m in result.moves] == [("a", None)]
    assert result.owners() == {"pa"}
    assert result.moves[0].node.dead
    assert ix.peek("T", seq(("a", 20))).hit_tokens == 0
    assert ix.counters.dropped_tokens[HBM] == 20


def test_children_leave_a_tier_before_their_parent() -> None:
    ix = make(hbm=50, dram=100)
    ix.insert("T", seq(("root", 20), ("leaf", 20)), 0.0)
    ix.match("T", seq(("root", 20)), 5.0)  # parent more recent than its child anyway
    first = ix.evict(HBM, 1, 6.0)
    assert [m.node.key for m in first.moves] == ["leaf"]
    second = ix.evict(HBM, 1, 7.0)
    assert [m.node.key for m in second.moves] == ["root"]
    assert ix.peek("T", seq(("root", 20), ("leaf", 20))).tokens_by_tier == [0, 40, 0]
    ix.check_integrity()


def test_locked_nodes_are_never_evicted() -> None:
    ix = make(hbm=40, dram=0)
    path = ix.insert("T", seq(("a", 20)), 0.0).path
    ix.insert("T", seq(("b", 20)), 1.0)
    ix.lock(path)
    assert ix.evictable(HBM) == 20
    result = ix.make_room(HBM, 40, 2.0)
    assert not result.ok
    assert result.freed == 20
    assert not path[0].dead
    assert path[0].tier is HBM
    ix.unlock(path)
    assert ix.evictable(HBM) == 20
    assert ix.make_room(HBM, 40, 3.0).ok
    ix.check_integrity()


def test_lock_needs_a_root_path() -> None:
    ix = make()
    path = ix.insert("T", seq(("a", 5), ("b", 5)), 0.0).path
    with pytest.raises(ValueError, match="root path"):
        ix.lock(path[1:])
    with pytest.raises(ValueError, match="not locked"):
        ix.unlock(path)


def test_demotion_that_does_not_fit_evicts_older_dram_or_drops() -> None:
    ix = make(hbm=20, dram=20)
    ix.insert("T", seq(("stale", 20)), 0.0)
    ix.make_room(HBM, 20, 1.0)  # stale -> DRAM
    ix.insert("T", seq(("a", 20)), 2.0)
    result = ix.make_room(HBM, 20, 3.0)  # a is newer than stale: stale dropped, a demoted
    assert [(m.node.key, m.src, m.dst) for m in result.moves] == [
        ("stale", DRAM, None),
        ("a", HBM, DRAM),
    ]
    ix.insert("T", seq(("b", 20)), 0.5)  # b is older than what DRAM holds: b is dropped
    result = ix.make_room(HBM, 20, 4.0)
    assert [(m.node.key, m.dst) for m in result.moves] == [("b", None)]
    ix.check_integrity()


def test_dram_demotes_to_disk_when_configured() -> None:
    ix = make(hbm=20, dram=20, disk=40)
    ix.insert("T", seq(("a", 20)), 0.0)
    ix.make_room(HBM, 20, 1.0)
    ix.insert("T", seq(("b", 20)), 2.0)
    result = ix.make_room(HBM, 20, 3.0)
    assert [(m.node.key, m.src, m.dst) for m in result.moves] == [
        ("a", DRAM, DISK),
        ("b", HBM, DRAM),
    ]
    assert ix.match("T", seq(("a", 20)), 4.0).tokens_by_tier == [0, 0, 20]


def test_dropping_a_node_drops_its_slower_descendants() -> None:
    ix = make(hbm=40, dram=100)
    path = ix.insert("T", seq(("a", 10), ("b", 10), ("c", 10)), 0.0).path
    ix.move(path[1:], DRAM, 1.0)
    result = ix.drop(path[:1], 2.0)
    assert result.moved_tokens == 30
    assert all(n.dead for n in path)
    assert ix.used(HBM) == 0
    assert ix.used(DRAM) == 0
    ix.check_integrity()


def test_move_demotes_subtree_and_promotes_ancestors() -> None:
    ix = make(hbm=100, dram=100)
    path = ix.insert("T", seq(("a", 10), ("b", 10), ("c", 10)), 0.0).path
    out = ix.move([path[1]], DRAM, 1.0)  # b's HBM child c must follow it
    assert out.ok
    assert out.moved_tokens == 20
    assert [n.tier for n in path] == [HBM, DRAM, DRAM]
    back = ix.move([path[2]], HBM, 2.0)  # promoting c first promotes b
    assert back.ok
    assert [m.node.key for m in back.moves] == ["b", "c"]
    assert ix.counters.promoted_tokens[HBM] == 20
    ix.check_integrity()


def test_reload_makes_room_without_evicting_its_own_prefix() -> None:
    ix = make(hbm=40, dram=100)
    path = ix.insert("T", seq(("a", 20), ("b", 20)), 0.0).path
    ix.move([path[1]], DRAM, 1.0)
    ix.insert("U", seq(("other", 20)), 2.0)  # HBM full: a (older, an HBM leaf) + other
    out = ix.move([path[1]], HBM, 3.0)
    assert out.ok
    assert [(m.node.key, m.evicted) for m in out.moves] == [
        ("other", True),
        ("b", False),
    ]
    assert out.evicted_tokens == 20
    assert [n.tier for n in path] == [HBM, HBM]
    ix.check_integrity()


def test_move_skips_locked_dead_and_unfitting_nodes() -> None:
    ix = make(hbm=100, dram=15)
    path = ix.insert("T", seq(("a", 10), ("b", 10)), 0.0).path
    ix.lock(path)
    assert ix.move(path[1:], DRAM, 1.0).skipped_tokens == 10
    ix.unlock(path)
    assert ix.move(path, DRAM, 2.0).skipped_tokens == 20  # a+b need 20 > 15 DRAM
    assert path[0].tier is HBM
    ix.drop(path[1:], 3.0)
    assert ix.move(path[1:], DRAM, 4.0).skipped_tokens == 10
    ix.check_integrity()


def test_making_room_for_a_move_never_evicts_a_node_the_same_move_demoted() -> None:
    """Found by the property test: demoting c, then its ancestor a (whose HBM subtree needs
    the room c took), must not push c on to DISK to make that room: a is skipped instead."""
    ix = make(hbm=9, dram=6, disk=3, demote=True)
    path = ix.insert("T", seq(("a", 3), ("b", 3), ("c", 3)), 0.0).path
    out = ix.move([path[2], path[0]], DRAM, 1.0)
    assert (out.ok, out.skipped_tokens, [n.tier for n in path]) == (False, 6, [HBM, HBM, DRAM])
    ix.check_integrity()
    # an unasked descendant may still make room: b (and its subtree c) then a
    ix = make(hbm=9, dram=6, disk=3, demote=True)
    path = ix.insert("T", seq(("a", 3), ("b", 3), ("c", 3)), 0.0).path
    assert ix.move([path[1], path[0]], DRAM, 1.0).ok
    assert [n.tier for n in path] == [DRAM, DRAM, DISK]
    ix.check_integrity()
    # a node asked for later in the list, already demoted in an earlier one's subtree, is
    # just as asked (found by the property test, 2026-12-05): b takes c and d with it, then
    # room for a may not push d on to DISK; a is skipped instead
    ix = make(hbm=12, dram=9, disk=3, demote=True)
    path = ix.insert("T", seq(("a", 3), ("b", 3), ("c", 3), ("d", 3)), 0.0).path
    out = ix.move([path[1], path[0], path[3]], DRAM, 1.0)
    assert (out.ok, [n.tier for n in path]) == (False, [HBM, DRAM, DRAM, DRAM])
    ix.check_integrity()


def test_drop_skips_locked_nodes() -> None:
    ix = make()
    path = ix.insert("T", seq(("a", 10)), 0.0).path
    ix.lock(path)
    assert ix.drop(path, 1.0).skipped_tokens == 10
    assert not path[0].dead


def test_reservations_count_against_capacity() -> None:
    ix = make(hbm=50)
    assert ix.reserve(HBM, 30)
    assert not ix.reserve(HBM, 30)
    assert (ix.used(HBM), ix.free(HBM), ix.reserved(HBM)) == (30, 20, 30)
    with pytest.raises(ValueError, match="reserved"):
        ix.release(HBM, 31)
    ix.release(HBM, 30)
    assert ix.free(HBM) == 50


def test_insert_promotes_a_prefix_found_on_a_slower_tier() -> None:
    ix = make()
    path = ix.insert("T", seq(("a", 10)), 0.0).path
    ix.move(path, DRAM, 1.0)
    result = ix.insert("T", seq(("a", 10), ("b", 5)), 2.0)
    assert result.new_tokens == 15
    assert [n.tier for n in result.path] == [HBM, HBM]
    assert ix.used(DRAM) == 0


def _retention_scenario(strategy: str, retain: bool, later_access: float) -> bool:
    """True if the old program's KV survives a make_room that must evict one program."""
    ix = make(hbm=40, dram=0, strategy=strategy)
    waiting = ix.insert("T", seq(("waiting", 20)), 0.0).path  # enters a tool wait at t=0
    if retain:
        ix.retain(waiting, until=10.0, now=0.0)
    ix.insert("T", seq(("other", 20)), later_access)
    ix.make_room(HBM, 20, later_access + 0.5)
    ix.check_integrity()
    return not waiting[0].dead


def test_retention_keeps_a_retained_node_that_lru_would_evict() -> None:
    assert _retention_scenario("retention", retain=True, later_access=5.0)  # positive
    assert not _retention_scenario("lru", retain=True, later_access=5.0)  # LRU ignores it
    assert not _retention_scenario("retention", retain=False, later_access=5.0)


def test_retention_decays_to_lru_after_its_deadline() -> None:
    assert not _retention_scenario("retention", retain=True, later_access=12.0)


def test_ending_a_retention_early_lets_lru_evict_it_again() -> None:
    ix = make(hbm=40, dram=0, strategy="retention")
    waiting = ix.insert("T", seq(("waiting", 20)), 0.0).path
    ix.retain(waiting, until=10.0, now=0.0)
    assert ix.end_retention(waiting, 4.0) == 20
    assert ix.end_retention(waiting, 4.5) == 0  # already ended
    ix.insert("T", seq(("other", 20)), 5.0)
    ix.make_room(HBM, 20, 5.5)
    ix.check_integrity()
    assert _dead(waiting[0])  # the older, no longer retained context went first


def test_retain_ignores_past_deadlines_and_dead_nodes() -> None:
    ix = make(strategy="retention")
    path = ix.insert("T", seq(("a", 10)), 0.0).path
    assert ix.retain(path, until=1.0, now=2.0) == 0
    assert ix.retain(path, until=5.0, now=2.0) == 10
    assert ix.retain(path, until=4.0, now=2.0) == 0  # never shortens
    ix.drop(path, 3.0)
    assert ix.retain(path, until=9.0, now=3.0) == 0


def _dead(node: Node) -> bool:
    """A call, so the type checker does not carry one assertion's answer into the next."""
    return node.dead


def test_a_queued_hold_outranks_recency_and_retention_until_released() -> None:
    ix = make(hbm=40, dram=0, strategy="retention")
    queued = ix.insert("T", seq(("queued", 20)), 0.0).path  # its program's next call waits
    ix.hold(queued)
    ix.hold(queued)  # two calls of the program (a fan-out) wait on it
    retained = ix.insert("T", seq(("retained", 20)), 1.0).path
    ix.retain(retained, until=100.0, now=1.0)
    # under the gate (what new work may take) neither goes: both are spared
    assert not ix.make_room(HBM, 20, 2.0, max_priority=2.0).ok
    # reclaiming soft-protected KV takes the retained one first, the held one last
    assert ix.make_room(HBM, 20, 2.0).ok
    assert _dead(retained[0])
    assert not _dead(queued[0])
    newer = ix.insert("T", seq(("newer", 20)), 2.5).path  # memory full again
    ix.unhold(queued)  # one call still waits: LRU would take the older node; the hold spares it
    assert ix.make_room(HBM, 20, 3.0, max_priority=3.0).ok
    assert _dead(newer[0])
    assert not _dead(queued[0])
    ix.insert("T", seq(("newest", 20)), 3.5)
    ix.unhold(queued)  # no call waits any more: plain LRU again
    assert ix.make_room(HBM, 20, 4.0, max_priority=4.0).ok
    assert _dead(queued[0])
    ix.unhold(queued)  # a dead node is skipped, not counted below zero
    assert queued[0].queued_holds == 0
    ix.check_integrity()


def test_lru_ignores_queued_holds_as_stock_engines_do() -> None:
    ix = make(hbm=40, dram=0, strategy="lru")
    queued = ix.insert("T", seq(("queued", 20)), 0.0).path
    ix.hold(queued)
    ix.insert("T", seq(("newer", 20)), 1.0)
    assert ix.make_room(HBM, 20, 2.0, max_priority=2.0).ok
    assert queued[0].dead


def test_owned_suffix_is_the_programs_private_tail() -> None:
    ix = make()
    ix.insert("T", [SYS], 0.0, owner="platform")
    path = ix.insert("T", [SYS, *seq(("a", 5), ("b", 5))], 1.0, owner="p1").path
    assert [n.key for n in PrefixIndex.owned_suffix(path, "p1")] == ["a", "b"]
    assert PrefixIndex.owned_suffix(path, "p2") == []


def test_strategy_registry() -> None:
    assert {"lru", "retention"} <= set(available_strategies())
    assert get_strategy("lru").name == "lru"
    with pytest.raises(KeyError, match="choose from"):
        get_strategy("nope")
    with pytest.raises(ValueError, match="twice"):
        register_strategy(LRU)


def test_integrity_check_detects_corruption() -> None:
    ix = make()
    path = ix.insert("T", seq(("a", 10), ("b", 10)), 0.0).path
    path[0].tier = DRAM  # behind the index's back: parent slower than its HBM child
    with pytest.raises(AssertionError):
        ix.check_integrity()
