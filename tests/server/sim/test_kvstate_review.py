"""The simulated engine's KV after the review (items 1, 3, 5, 6): under write-back, what an
admission evicts to DRAM is written back over the host link first; offloaded KV is
soft-retained on DRAM, a call turned away evicts nothing, and a reload swaps with its victim
instead of dropping it."""

from __future__ import annotations

import math

from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.tiers import WRITE_BACK, Tier
from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.kvstate import EngineKv

COST = preset("H200-141GB", "llama-3.1-8b", 1)


def _kv(hbm: int = 100, dram: int = 100) -> EngineKv:
    config = EngineConfig(hbm_kv_tokens=hbm, host_kv_tokens=dram, host_write_policy=WRITE_BACK)
    return EngineKv(COST, config, EventLog())


def _call(program: str, blocks: list[Block], output: int = 10) -> SimCall:
    prompt = sum(b.tokens for b in blocks)
    ticket = CallTicket(f"{program}/n/1", program, "n", "t", 0.0, prompt_tokens=prompt)
    return SimCall(ticket, blocks, output, (program, "out"))


def _cached(kv: EngineKv, program: str, tokens: int, now: float) -> list[Node]:
    """``program``'s context of ``tokens``, computed and cached at ``now``."""
    blocks = [Block(program, tokens)]
    kv.insert("t", blocks, program, now)
    return kv.index.match("t", blocks, now).path


def test_an_admission_waits_for_the_write_back_of_what_it_evicted() -> None:
    kv = _kv()
    old = _cached(kv, "old", 100, 0.0)
    got = kv.admit(_call("p", [Block("new", 40)]), 1.0, reclaim_retained=False)
    assert got is not None
    assert old[0].tier is Tier.DRAM  # demoted to make room: written back
    assert got.write_back_tokens == 100
    assert got.loads  # it waits on the link before it prefills
    assert math.isclose(got.ready_at, 1.0 + COST.transfer_seconds(100))


def test_a_reload_queues_behind_the_write_back_of_its_victim() -> None:
    kv = _kv()
    slow = _cached(kv, "s", 60, 0.0)
    kv.apply_cache_action("s", slow, CacheAction.OFFLOAD, 0.0, 0.0)
    offloaded_by = COST.transfer_seconds(60)
    victim = _cached(kv, "v", 100, 1.0)
    got = kv.admit(_call("s", [Block("s", 60)]), 2.0, reclaim_retained=False)
    assert got is not None
    # item 6: the victim takes the DRAM room the reload leaves instead of being dropped
    assert victim[0].tier is Tier.DRAM
    assert slow[0].tier is Tier.HBM
    assert offloaded_by < 2.0  # the offload's copy is long done
    want = 2.0 + COST.transfer_seconds(100) + COST.transfer_seconds(60)
    assert math.isclose(got.ready_at, want)
    kv.index.check_integrity()


def test_offloaded_kv_is_soft_retained_on_dram_until_the_program_is_back() -> None:
    kv = _kv()
    mine = _cached(kv, "p", 60, 0.0)
    assert kv.apply_cache_action("p", mine, CacheAction.OFFLOAD, 100.0, 0.0) == 60
    assert mine[0].tier is Tier.DRAM
    assert mine[0].retain_until == 100.0
    # another program's context is evicted from HBM: DRAM has 40 free, the retained
    # context outranks it, so it is dropped rather than pushing the offloaded one out
    other = _cached(kv, "q", 80, 5.0)
    kv.admit(_call("r", [Block("r", 90)]), 6.0, reclaim_retained=False)
    assert other[0].dead
    assert mine[0].tier is Tier.DRAM
    # the program is back (or ended): ordinary cache again, ranked by its last access
    assert kv.release_kept("p", 7.0) == 60
    assert mine[0].retain_until == -math.inf
    kv.index.check_integrity()


def test_a_call_turned_away_evicts_nothing() -> None:
    kv = _kv(dram=0)
    a = _cached(kv, "a", 50, 0.0)
    b = _cached(kv, "b", 40, 0.0)
    kv.apply_cache_action("b", b, CacheAction.KEEP, 100.0, 0.0)
    call = _call("c", [Block("c", 60)])  # 70 with its output: only a's 50 and 10 free
    assert kv.admit(call, 10.0, reclaim_retained=False) is None
    assert not a[0].dead
    assert kv.index.used(Tier.HBM) == 90
    assert (call.path, call.reserved) == ([], 0)


def test_a_call_reading_a_prefix_still_reloading_waits_for_its_copy() -> None:
    """A reload marks its nodes HBM at once; a second call matching them while the copy was
    on the link started at once, reading KV that was not there yet (stop 53's KV review)."""
    kv = _kv(hbm=200, dram=200)
    shared = _cached(kv, "s", 60, 0.0)
    kv.apply_cache_action("s", shared, CacheAction.OFFLOAD, 0.0, 0.0)
    first = kv.admit(_call("s", [Block("s", 60), Block("a", 10)]), 10.0, reclaim_retained=False)
    assert first is not None
    assert first.reload_tokens == 60
    assert first.ready_at > 10.0
    second = kv.admit(_call("s2", [Block("s", 60), Block("b", 10)]), 10.0, reclaim_retained=False)
    assert second is not None
    assert second.reload_tokens == 0  # nothing of its own to reload: the nodes are HBM's
    assert second.loads
    assert second.ready_at == first.ready_at
    # once the copy has landed a reader starts at once
    later = kv.admit(_call("s3", [Block("s", 60)]), first.ready_at + 1.0, reclaim_retained=False)
    assert later is not None
    assert not later.loads
    assert later.ready_at == first.ready_at + 1.0


def test_an_eviction_counts_each_node_once() -> None:
    """A node demoted to DRAM and then dropped from it to make DRAM room for the next one, in
    one eviction, counted twice in ``kv.evicted`` (stop 53's KV review)."""
    kv = _kv(hbm=100, dram=60)
    first = _cached(kv, "a", 50, 0.0)
    second = _cached(kv, "b", 50, 1.0)
    assert kv.admit(_call("c", [Block("c", 90)]), 2.0, reclaim_retained=False) is not None
    assert first[0].dead  # demoted, then dropped to make DRAM room for the second
    assert second[0].tier is Tier.DRAM
    assert isinstance(kv.sink, EventLog)
    evicted = [e for e in kv.sink.events if e.kind is EventKind.KV_EVICTED]
    assert [e.data["tokens"] for e in evicted] == [100]


def test_a_block_computed_again_at_a_new_place_is_no_recompute() -> None:
    """A compaction starts a fresh context from the last tool result: that block, computed
    before after the old history, counted as recomputed (21K of a 20-session long-coding run's
    21K recomputed tokens at low load, its old context still cached)."""
    kv = _kv(hbm=1_000, dram=1_000)
    kv.insert("t", [Block("sys", 100), Block("history", 300), Block("tool", 50)], "p", 0.0)
    compacted = _call("p", [Block("sys", 100), Block("summary", 40), Block("tool", 50)])
    got = kv.admit(compacted, 1.0, reclaim_retained=False)
    assert got is not None
    assert (got.hit_tokens, got.recompute_tokens) == (100, 0)
    kv.release(compacted)
    # the old context dropped and read again in place: that is a recompute
    kv.index.drop(
        kv.index.match("t", [Block("sys", 100), Block("history", 300)], 2.0).path[1:], 2.0
    )
    again = kv.admit(
        _call("q", [Block("sys", 100), Block("history", 300), Block("tool", 50)]),
        3.0,
        reclaim_retained=False,
    )
    assert again is not None
    assert again.recompute_tokens == 350
