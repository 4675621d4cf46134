"""The plugin's status file keeps within its share of the scheduler's time: it lists every
queued request, and with a long queue each write (due at once after every control change, one
per tool-wait hint) would otherwise take a large part of the scheduler's passes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agentconsole.server.runtime.sglang.control import CONTROL_FILE, ControlState, write_json_atomic
from agentconsole.server.runtime.sglang.lockstep import Layout
from agentconsole.server.runtime.sglang.plugin_state import STATUS_TIME_SHARE, PluginState


class _Writes:
    """Stands in for ``PluginState.publish``: records each write, taking ``cost_s``."""

    def __init__(self) -> None:
        self.at: list[float] = []
        self.cost_s = 0.0

    def __call__(self, scheduler: Any, wall: float, plan: Any = None) -> None:
        self.at.append(wall)
        time.sleep(self.cost_s)


def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PluginState, _Writes]:
    write_json_atomic(tmp_path / CONTROL_FILE, ControlState(version=1).to_json())
    state = PluginState(tmp_path, Layout(tp_size=1, tp_rank=0))
    writes = _Writes()
    monkeypatch.setattr(state, "publish", writes)
    return state, writes


def test_a_costly_status_is_written_at_most_its_share_of_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, writes = _state(tmp_path, monkeypatch)
    writes.cost_s = 0.01  # a long queue: the first write takes 10 ms
    assert state.write_status_if_due(None, 1000.0)
    gap = 0.01 / STATUS_TIME_SHARE  # at least 0.2 s before the next (a sleep never runs short)
    for wall in (1000.1, 1000.0 + gap * 0.9):
        state._status_dirty = True  # a control change waits to be acknowledged
        assert not state.write_status_if_due(None, wall)
    assert state.write_status_if_due(None, 1001.0)  # unless the write took 50 ms
    assert writes.at == [1000.0, 1001.0]


def test_a_cheap_status_is_written_at_once_when_a_control_change_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, writes = _state(tmp_path, monkeypatch)
    assert state.write_status_if_due(None, 1000.0)
    assert not state.write_status_if_due(None, 1000.01)  # before the interval: not due
    state._status_dirty = True
    assert state.write_status_if_due(None, 1000.02)
    assert state.write_status_if_due(None, 1000.15)  # the interval passed
    assert state.write_status_if_due(None, 999.0)  # the wall clock stepped back: not stuck
    assert writes.at == [1000.0, 1000.02, 1000.15, 999.0]
