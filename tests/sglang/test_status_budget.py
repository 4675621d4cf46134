"""The plugin's periodic status file keeps within its share of the scheduler's time (it lists
every queued request, which takes long with a long queue), while a control change the
adapter waits for (an operator's action) is still acknowledged at once (the scheduler may go
idle after the pass that applied it); the changes written on every call are not."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.control import (
    CONTROL_FILE,
    ControlState,
    ControlWriter,
    read_json,
    write_json_atomic,
)
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
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
    for wall in (1000.1, 1000.0 + gap * 0.9):  # past the 0.1 s interval, within the share
        assert not state.write_status_if_due(None, wall)
    state.control.ack_version += 1  # a control change to acknowledge: written at once
    assert state.write_status_if_due(None, 1000.0 + gap * 0.95)
    assert state.write_status_if_due(None, 1002.0)  # unless the writes took 50 ms
    assert writes.at == [1000.0, 1000.0 + gap * 0.95, 1002.0]


def test_a_cheap_status_is_written_at_once_when_a_control_change_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, writes = _state(tmp_path, monkeypatch)
    assert state.write_status_if_due(None, 1000.0)
    assert not state.write_status_if_due(None, 1000.01)  # before the interval: not due
    state.control.ack_version += 1
    assert state.write_status_if_due(None, 1000.02)
    assert state.write_status_if_due(None, 1000.15)  # the interval passed
    assert state.write_status_if_due(None, 999.0)  # the wall clock stepped back: not stuck
    assert writes.at == [1000.0, 1000.02, 1000.15, 999.0]


def test_only_a_control_change_someone_waits_for_is_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tool-wait hints and re-ranks are written on every call: acknowledging each at once
    would list the whole queue up to 50 times a second. An operator's action is waited for."""
    state, writes = _state(tmp_path, monkeypatch)
    assert state.write_status_if_due(None, 1000.0)  # the first status (ack_version 0)
    control = tmp_path / CONTROL_FILE
    hint = ControlState(version=2, ack_version=0, retention={})
    write_json_atomic(control, hint.to_json())
    assert state.refresh(1000.01, force=True)
    assert state.control.version == 2
    assert not state.write_status_if_due(None, 1000.02)  # shown at the next periodic write
    drain = ControlState(version=3, ack_version=3, paused=True)
    write_json_atomic(control, drain.to_json())
    assert state.refresh(1000.03, force=True)
    assert state.write_status_if_due(None, 1000.04)  # waited for: at once
    assert not state.write_status_if_due(None, 1000.05)  # once
    later = ControlState(version=4, ack_version=3, paused=True)  # a hint after the drain
    write_json_atomic(control, later.to_json())
    assert state.refresh(1000.06, force=True)
    assert not state.write_status_if_due(None, 1000.07)
    assert state.write_status_if_due(None, 1000.15)  # the interval passed
    restarted = ControlState(version=2, ack_version=2)  # a control plane that counts anew
    write_json_atomic(control, restarted.to_json())
    assert state.refresh(1000.16, force=True)
    assert state.write_status_if_due(None, 1000.17)  # waited for, though lower: at once
    assert writes.at == [1000.0, 1000.04, 1000.15, 1000.17]


def test_the_writer_marks_the_versions_it_waits_for(tmp_path: Path) -> None:
    writer = ControlWriter(tmp_path)
    assert writer.write() == 2
    assert writer.write(ack=True) == 3
    assert writer.write() == 4
    written = ControlState.from_json(read_json(tmp_path / CONTROL_FILE) or {})
    assert (written.version, written.ack_version) == (4, 3)


def test_under_tensor_parallelism_the_status_keeps_its_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control writer plans each rank's switch from the status's pass count and rate: a
    stale status would make controls late, so lockstep keeps the 0.1 s cadence."""
    state, writes = _state(tmp_path, monkeypatch)
    state.enable_lockstep()
    writes.cost_s = 0.01
    assert state.write_status_if_due(None, 1000.0)
    assert state.write_status_if_due(None, 1000.11)
    assert writes.at == [1000.0, 1000.11]


def test_a_malformed_fairness_rule_keeps_the_old_rules_and_applies_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, _ = _state(tmp_path, monkeypatch)
    half_life = state.guard.config.half_life_s
    bad = ControlState(version=2, paused=True, fairness={"half_life_s": "soon"})
    write_json_atomic(tmp_path / CONTROL_FILE, bad.to_json())
    assert state.refresh(1000.0, force=True)
    assert state.paused  # the rest of the version is in force (and will be acknowledged)
    assert state.control.version == 2
    assert state.guard.config.half_life_s == half_life
    assert state.errors == 1


def test_operator_actions_are_awaited_and_the_per_call_hints_are_not(tmp_path: Path) -> None:
    """Drain, resume, boost and a policy switch mark their version as awaited (the plugin
    writes its status at once); a tool-wait hint does not. (Preempt marks its version the
    same way; it needs a running call, see ``test_sglang_preemption``.)"""
    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path), state_dir=tmp_path)

    def awaited() -> bool:
        written = ControlState.from_json(read_json(tmp_path / CONTROL_FILE) or {})
        return written.ack_version == written.version

    async def actions() -> list[bool]:
        marks = []
        for action in (runtime.pause(), runtime.resume(), runtime.boost("p", 5.0)):
            await action
            marks.append(awaited())
        runtime.set_policy("fcfs")
        marks.append(awaited())
        await runtime.cache_hint("p", CacheAction.KEEP, 5.0)
        marks.append(awaited())
        return marks

    assert asyncio.run(actions()) == [True, True, True, True, False]
