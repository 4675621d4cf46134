"""Engine stats name their engine, so GPU-seconds count every replica (not only the last)."""

from __future__ import annotations

import pytest

from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.events import EventKind
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation


def test_gpu_seconds_sum_every_replica() -> None:
    programs = generate("seed-mix", 16, 0.2, seed=3)
    sim = Simulation(programs, preset("H200-141GB", "llama-3.1-8b"), SimConfig(replicas=2))
    result = sim.run()
    stats = [e for e in result.events.events if e.kind is EventKind.ENGINE_STATS]
    assert {e.data["engine"] for e in stats} == {"0", "1"}
    busy = [engine.busy_s for engine in result.engines]
    assert min(busy) > 0  # both replicas worked, so a one-engine count would be short
    metrics = MetricsAggregator().observe_all(result.events.events)
    report = metrics.report()
    last = {str(e.data["engine"]): e.data["busy_s"] for e in stats}  # the latest of each
    assert all(isinstance(v, float) for v in last.values())
    assert metrics.busy_s == pytest.approx(sum(float(str(v)) for v in last.values()))
    # stats are sampled every 5 s, and once more at the end: the last blocks' busy time is
    # reported too (it trailed by up to 5 s an engine before), so GPU-seconds are all of it
    assert metrics.busy_s == pytest.approx(sum(busy))
    assert metrics.busy_s > max(busy) * 1.5
    assert report["gpu_s_per_success"] == pytest.approx(metrics.busy_s / report["finished"])
