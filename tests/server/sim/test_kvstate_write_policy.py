"""The host tier's write policies, as SGLang's. Write-through (its default): every node is
copied to DRAM as it is inserted, so DRAM's room for KV only DRAM holds is what HBM's copies
leave, an eviction frees HBM without waiting for a copy, and an offload moves nothing over the
link; a reload still crosses it. Write-back: an eviction copies its victims, and the whole
engine runs no pass until the copy is done (SGLang waits on its scheduler thread)."""

from __future__ import annotations

import math

import pytest

from agentconsole.kvtiers.node import Block
from agentconsole.kvtiers.tiers import WRITE_BACK, WRITE_THROUGH, Tier
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sim.calls import EngineConfig
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.engine import SimEngine
from agentconsole.server.runtime.sim.kvstate import EngineKv
from tests.server.sim.test_kvstate_review import _cached, _call

COST = preset("H200-141GB", "llama-3.1-8b", 1)


def _kv(hbm: int = 100, host: int = 200, policy: str = WRITE_THROUGH) -> EngineKv:
    config = EngineConfig(hbm_kv_tokens=hbm, host_kv_tokens=host, host_write_policy=policy)
    return EngineKv(COST, config, EventLog())


def test_write_through_is_the_default_as_in_sglang() -> None:
    assert EngineConfig().host_write_policy == WRITE_THROUGH


def test_dram_holds_copies_of_hbm_so_its_own_room_is_the_rest() -> None:
    assert _kv(hbm=100, host=250).tiers.capacity(Tier.DRAM) == 150
    assert _kv(hbm=100, host=250, policy=WRITE_BACK).tiers.capacity(Tier.DRAM) == 250
    # a host pool no larger than HBM's copies leaves nothing to demote to
    assert _kv(hbm=100, host=80).tiers.capacity(Tier.DRAM) == 0


def test_an_eviction_demotes_without_waiting_for_a_copy() -> None:
    kv = _kv()
    old = _cached(kv, "old", 100, 0.0)
    got = kv.admit(_call("p", [Block("new", 40)]), 1.0, reclaim_retained=False)
    assert got is not None
    assert old[0].tier is Tier.DRAM  # its copy was made when it was computed
    assert got.write_back_tokens == 0
    assert not got.loads
    assert got.ready_at == 1.0
    kv.index.check_integrity()


def test_an_offload_moves_no_bytes_but_its_reload_does() -> None:
    kv = _kv()
    mine = _cached(kv, "p", 60, 0.0)
    assert kv.apply_cache_action("p", mine, CacheAction.OFFLOAD, 0.0, 0.0) == 60
    assert mine[0].tier is Tier.DRAM
    back = kv.admit(_call("p", [Block("p", 60)]), 0.0, reclaim_retained=False)
    assert back is not None
    assert back.reload_tokens == 60
    # the link was idle: the offload queued nothing ahead of the reload
    assert math.isclose(back.ready_at, COST.transfer_seconds(60))


def test_an_unknown_write_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="host_write_policy"):
        EngineConfig(host_write_policy="write_sometimes")


@pytest.mark.parametrize("policy", [WRITE_THROUGH, WRITE_BACK])
def test_a_write_back_eviction_stops_every_call_until_its_copy_is_done(policy: str) -> None:
    config = EngineConfig(hbm_kv_tokens=1_000, host_kv_tokens=2_000, host_write_policy=policy)
    engine = SimEngine(COST, get_policy("fcfs"), EventLog(), config=config)
    victim = _cached(engine.kv, "old", 900, 0.0)
    engine.submit(_call("p", [Block("new", 500)]), 1.0)
    wake = engine.plan(1.0)
    assert victim[0].tier is Tier.DRAM
    if policy == WRITE_BACK:
        # no pass runs (no block in flight) until the victim's 900 tokens are on the host
        assert not engine.in_flight
        assert wake == engine.kv.blocked_until == 1.0 + COST.transfer_seconds(900)
    else:
        assert engine.in_flight  # the new call's prefill runs at once
        assert engine.kv.blocked_until == 0.0
