"""The simulated engine's KV: admission holds nothing when it fails, a reused context is a
hit, a dropped one is recomputed, tool-wait retention is counted until its deadline or the
program's return (its next call, or its end), and copies over the host link queue one behind
the other."""

from __future__ import annotations

import math
import time

import pytest

from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.tiers import WRITE_BACK, Tier
from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.engine import SimEngine
from agentconsole.server.runtime.sim.kvstate import EngineKv
from agentconsole.server.runtime.sim.live import SimLiveRuntime

COST = preset("H200-141GB", "llama-3.1-8b", 1)


def _kv(hbm_fraction: float = 0.9) -> tuple[EngineKv, EventLog]:
    log = EventLog()
    return EngineKv(COST, EngineConfig(mem_fraction_static=hbm_fraction), log), log


def _call(program: str, blocks: list[Block], output: int = 100) -> SimCall:
    prompt = sum(b.tokens for b in blocks)
    ticket = CallTicket(f"{program}/n/1", program, "n", "t", 0.0, prompt_tokens=prompt)
    return SimCall(ticket, blocks, output, (program, "out"))


def test_admission_that_does_not_fit_holds_nothing() -> None:
    kv, _ = _kv()
    capacity = kv.index.capacity(Tier.HBM)
    big = _call("p", [Block("huge", capacity)], output=1000)
    assert kv.admit(big, 0.0, reclaim_retained=True) is None
    assert kv.index.used(Tier.HBM) == 0
    assert (big.path, big.reserved) == ([], 0)


def test_a_finished_context_is_a_hit_and_release_gives_back_the_reservation() -> None:
    kv, _ = _kv()
    context = [Block("system", 16_000), Block("task", 40_000)]
    first = _call("p", context)
    got = kv.admit(first, 0.0, reclaim_retained=False)
    assert got is not None
    assert (got.hit_tokens, got.miss_tokens, got.recompute_tokens) == (0, 56_000, 0)
    assert first.reserved == 56_000 + 100
    kv.release(first)
    kv.insert("t", context, "p", 1.0)
    second = _call("p2", [*context, Block("turn", 500)])
    again = kv.admit(second, 2.0, reclaim_retained=False)
    assert again is not None
    assert (again.hit_tokens, again.miss_tokens, again.reload_tokens) == (56_000, 500, 0)


def test_a_dropped_context_is_recomputed_and_counted() -> None:
    kv, log = _kv()
    context = [Block("system", 8_000), Block("task", 20_000)]
    kv.insert("t", context, "p", 0.0)
    path = kv.index.match("t", context, 0.0).path
    assert kv.apply_cache_action("p", path[1:], CacheAction.RECOMPUTE, 0.0, 1.0) == 20_000
    got = kv.admit(_call("p", context), 2.0, reclaim_retained=False)
    assert got is not None
    assert (got.hit_tokens, got.recompute_tokens) == (8_000, 20_000)
    kinds = [e.kind for e in log.events]
    assert kinds.count(EventKind.KV_DROPPED) == kinds.count(EventKind.KV_RECOMPUTED) == 1


def test_retention_counts_until_its_deadline() -> None:
    kv, _ = _kv()
    context = [Block("ctx", 30_000)]
    kv.insert("t", context, "p", 0.0)
    path = kv.index.match("t", context, 0.0).path
    assert kv.apply_cache_action("p", path, CacheAction.KEEP, 5.0, 0.0) == 30_000
    assert kv.retained_tokens(4.9) == 30_000
    assert kv.retained_tokens(5.0) == 0


def test_a_program_that_comes_back_or_ends_releases_what_it_kept() -> None:
    kv, _ = _kv()
    contexts = {name: [Block(name, 10_000)] for name in ("pa", "pb")}
    for name, blocks in contexts.items():
        kv.insert("t", blocks, name, 0.0)
        path = kv.index.match("t", blocks, 0.0).path
        kv.apply_cache_action(name, path, CacheAction.KEEP, 60.0, 0.0)
    # a second keep of the same program joins the first (counted once, the later deadline)
    more = [Block("pa", 10_000), Block("pa-turn", 2_000)]
    kv.insert("t", more, "pa", 1.0)
    turn = kv.index.match("t", more, 1.0).path[1:]
    kv.apply_cache_action("pa", turn, CacheAction.KEEP, 90.0, 1.0)
    assert kv.retained_tokens(2.0) == 22_000
    assert kv.release_kept("pa", 3.0) == 12_000
    assert kv.retained_tokens(3.0) == 10_000
    node = kv.index.match("t", contexts["pa"], 3.0).path[0]
    # ordinary cache again: it ranks by its last access, not as if used at the release
    assert node.retain_until == -math.inf
    assert kv.release_kept("pa", 4.0) == 0  # nothing left to release
    # the other program's keep still lapses at its own deadline, and only once
    assert kv.retained_tokens(59.9) == 10_000
    assert kv.retained_tokens(91.0) == 0


def _kept(kv: EngineKv, retain_s: float, now: float = 0.0, tokens: int = 10_000) -> list[Node]:
    """Program ``p``'s context of ``tokens``, cached and kept for ``retain_s`` at ``now``."""
    context = [Block("ctx", tokens)]
    kv.insert("t", context, "p", now)
    path = kv.index.match("t", context, now).path
    kv.apply_cache_action("p", path, CacheAction.KEEP, retain_s, now)
    return path


def test_keeping_the_same_context_again_counts_it_once() -> None:
    kv, _ = _kv()
    path = _kept(kv, 20.0)
    kv.apply_cache_action("p", path, CacheAction.KEEP, 40.0, 1.0)  # a later tool, longer
    assert kv.retained_tokens(2.0) == 10_000
    # a keep whose deadline passed, not yet counted out, is replaced, not added to
    kv.apply_cache_action("p", path, CacheAction.KEEP, 5.0, 50.0)
    assert kv.retained_tokens(50.0) == 10_000
    assert kv.retained_tokens(55.0) == 0


def test_offloading_or_dropping_a_kept_context_ends_the_keep() -> None:
    kv, _ = _kv()
    path = _kept(kv, 60.0)
    kv.apply_cache_action("p", path, CacheAction.OFFLOAD, 0.0, 1.0)  # parked, say
    assert kv.retained_tokens(1.0) == 0


def test_the_engine_releases_a_keep_when_the_program_s_next_call_arrives() -> None:
    engine = SimEngine(COST, get_policy("fcfs"), EventLog())
    _kept(engine.kv, 60.0, tokens=20_000)
    assert engine.kv.retained_tokens(1.0) == 20_000
    engine.submit(_call("p", [Block("ctx", 20_000), Block("turn", 100)]), 5.0)
    assert engine.kv.retained_tokens(5.0) == 0


@pytest.mark.parametrize("holds", [False, True])
def test_new_work_evicts_retained_kv_last_but_waits_for_it_only_under_holds(holds: bool) -> None:
    """As the plugin's eviction strategy in SGLang: a kept context goes after every other
    node, and a call that needs its room takes it (a busy engine holds no call back for a
    program's tool). Only bench's queued-call holds (``hold_queued_context``, not a serve
    mechanism) make the call wait for the retention instead."""
    config = EngineConfig(hbm_kv_tokens=40_000, host_kv_tokens=0, hold_queued_context=holds)
    engine = SimEngine(COST, get_policy("cp-cache"), EventLog(), config=config)
    engine.submit(_call("busy", [Block("busy", 5_000)], output=10_000), 0.0)
    kept = _kept(engine.kv, 60.0, now=0.0, tokens=20_000)
    end = engine.plan(0.0)
    while end is not None and end < 0.5:  # its prefill, then a long decode keeps it busy
        engine.complete(end)
        end = engine.plan(end)
    engine.submit(_call("q", [Block("new", 8_000)]), 0.5)  # 5,000 free: needs the kept room
    end = engine.interrupt(0.5) or end
    assert end is not None
    engine.complete(end)
    engine.plan(end)
    admitted = "q/n/1" in engine.running
    assert admitted is not holds
    assert kept[0].dead is not holds


def test_serve_s_simulated_runtime_releases_a_keep_when_the_program_ends() -> None:
    runtime = SimLiveRuntime(COST, time_scale=0.0)  # its engine's clock: the wall clock
    engine, now = runtime.engine, time.time()
    path = _kept(engine.kv, 600.0, now)
    runtime.program_ended("p")
    assert engine.kv.retained_tokens(now + 1.0) == 0
    assert path[0].retain_until < now + 600.0  # ordinary cache again, not kept to the deadline


def test_offloads_and_reloads_share_one_host_link() -> None:
    log = EventLog()
    kv = EngineKv(COST, EngineConfig(host_write_policy=WRITE_BACK), log)
    a, b = [Block("a", 40_000)], [Block("b", 40_000)]
    for name, blocks in (("pa", a), ("pb", b)):
        kv.insert("t", blocks, name, 0.0)
        path = kv.index.match("t", blocks, 0.0).path
        kv.apply_cache_action(name, path, CacheAction.OFFLOAD, 0.0, 0.0)
    copy = COST.transfer_seconds(40_000)
    reload = kv.admit(_call("pa", a), 0.0, reclaim_retained=False)
    assert reload is not None
    assert reload.reload_tokens == 40_000
    # two offloads are on the link first: the reload ends after three copies
    assert abs(reload.ready_at - 3 * copy) < 1e-9
    assert [e.kind for e in log.events].count(EventKind.KV_OFFLOADED) == 2
