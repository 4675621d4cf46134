"""The plugin's preemption guard counts a call's residency from its last admission, doubled per
time it came back from the queue, as the simulator's does: before, it counted from the first
admission, so a call resumed a moment ago could be displaced again at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentconsole.server.runtime.sglang.control import CONTROL_FILE, ControlState, write_json_atomic
from agentconsole.server.runtime.sglang.lockstep import Layout
from agentconsole.server.runtime.sglang.plugin_state import PluginState
from tests.sglang.queued import queued

pytestmark = pytest.mark.sglang


def _state(tmp: Path) -> PluginState:
    """Preemption on, a call protected for its first second (no restore price)."""
    control = ControlState(version=1, preemption={"min_residency_s": 1.0, "cost_ratio": 0.0})
    write_json_atomic(tmp / CONTROL_FILE, control.to_json())
    state = PluginState(tmp, Layout(tp_size=1, tp_rank=0))
    state.refresh(time.time(), force=True)
    return state


def test_a_resumed_call_is_protected_from_its_resume_for_twice_as_long(tmp_path: Path) -> None:
    state, now = _state(tmp_path), time.time()
    victim, better = queued("v", 100.0, now - 20), queued("w", 0.1, now - 20)
    state.sort_waiting([victim], now - 11)
    state.requests.seen_running(victim.rid, now - 10)  # first admitted 10 s ago
    assert state.plan_preemption(better, [victim], 10) is not None  # resident 10 s: displaced
    state.sort_waiting([victim], now - 3)  # back in the queue (preempted), then resumed
    state.requests.seen_running(victim.rid, now - 1.5)
    assert state.requests.resident_s(victim.rid, now) == pytest.approx(1.5)
    assert state.plan_preemption(better, [victim], 10) is None  # 1.5 s < 2 x 1 s
    state.requests.seen_running(victim.rid, now - 1.0)  # (its next step changes nothing)
    assert state.requests.resident_s(victim.rid, now) == pytest.approx(1.5)
