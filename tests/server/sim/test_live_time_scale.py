"""``serve --runtime sim --time-scale``: the speeds the driver prices a tool wait with are wall
seconds, the learned prefill and tool latencies as much as the host link (a reload priced in
engine seconds against wall-clock tools looked ten times dearer at 0.1, and the tool-wait
decisions flipped with the scale: 80% offloads in bench, 22% at 0.1, 74% at 0.5)."""

from __future__ import annotations

import pytest

from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime


@pytest.mark.parametrize("scale", [0.1, 0.5, 1.0, 2.0])
def test_the_host_link_is_in_wall_seconds_as_the_service_prior(scale: float) -> None:
    cost = preset()
    engine_s = SimLiveRuntime(cost, time_scale=1.0)
    scaled = SimLiveRuntime(cost, time_scale=scale)
    base, memory = engine_s.memory(), scaled.memory()
    tokens = 100_000
    reload_engine_s = tokens * base.kv_bytes_per_token / base.host_link_bytes_per_s
    reload_wall_s = tokens * memory.kv_bytes_per_token / memory.host_link_bytes_per_s
    assert reload_wall_s == pytest.approx(reload_engine_s * scale)
    prior, scaled_prior = engine_s.service_prior(), scaled.service_prior()
    assert prior is not None
    assert scaled_prior is not None
    assert scaled_prior.prefill_s_per_token == pytest.approx(prior.prefill_s_per_token * scale)
    # the ratio a decision weighs (a reload against a prefill) is the same at every scale
    assert reload_wall_s / scaled_prior.prefill_s_per_token == pytest.approx(
        reload_engine_s / prior.prefill_s_per_token
    )
