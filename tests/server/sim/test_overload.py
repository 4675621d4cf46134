"""Overload: a program-aware engine keeps the contexts of programs in flight; a stock one
thrashes (new programs' prefills evict the context a queued call is about to use)."""

from __future__ import annotations

from typing import Any

import pytest

from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.kvstate import EngineKv
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

COST = preset("H200-141GB", "llama-3.1-8b", 1)
#: 80 programs arriving at twice what one simulated H200 finishes (~0.1 programs/s)
PROGRAMS = generate("seed-mix", n_programs=80, rate=0.2, seed=1)


def _overloaded(policy: str) -> dict[str, Any]:
    result = Simulation(PROGRAMS, COST, SimConfig(policy=policy)).run()
    assert not [n for n in result.engine.index.nodes() if n.queued_holds], "holds leaked"
    result.engine.index.check_integrity()
    return MetricsAggregator().observe_all(result.events.events).report()


@pytest.mark.parametrize("policy", ["cp-cache", "plas"])
def test_program_aware_engine_does_not_thrash_where_stock_caching_does(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stock = _overloaded("fcfs")
    aware = _overloaded(policy)
    assert stock["recompute_tokens"] > 1_000_000  # the thrash: whole 62K contexts, again
    assert aware["recompute_tokens"] < stock["recompute_tokens"] / 10
    assert aware["throughput_programs_per_s"] > 1.05 * stock["throughput_programs_per_s"]
    # the queued-call hold is what does it: without it the same policy thrashes too
    monkeypatch.setattr(EngineKv, "hold_queued", lambda self, call: None)
    unheld = _overloaded(policy)
    assert unheld["recompute_tokens"] > 10 * max(aware["recompute_tokens"], 100_000)
    assert unheld["throughput_programs_per_s"] < aware["throughput_programs_per_s"]
