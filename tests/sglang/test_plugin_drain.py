"""The plugin's drain gate in SGLang's ``PrefillAdder`` (``plugin._adder_class``), without an
engine: a drain admits no new call, and a call that already ran (SGLang retracted it under
memory pressure, or an operator preempt did) is admitted again, or the drain never ends."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentconsole.server.runtime.sglang import plugin, symbols
from agentconsole.server.runtime.sglang.control import CONTROL_FILE, ControlState, write_json_atomic
from agentconsole.server.runtime.sglang.lockstep import Layout
from agentconsole.server.runtime.sglang.plugin_state import PluginState
from tests.sglang.queued import queued as _waiting

pytestmark = pytest.mark.sglang


def test_a_drain_admits_only_calls_that_already_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_json_atomic(tmp_path / CONTROL_FILE, ControlState(version=1, paused=True).to_json())
    state = PluginState(tmp_path)
    state._apply(ControlState(version=1, paused=True))
    adder_class = plugin._adder_class(state)
    base = symbols.load(symbols.PREFILL_ADDER)
    monkeypatch.setattr(base, "add_one_req", lambda self, req, *a, **k: "admitted")
    adder: Any = object.__new__(adder_class)  # SGLang's constructor is not what is tested
    state.requests.seen_running("retracted", 1.0)  # it ran a step before the drain

    other = symbols.load(symbols.ADD_REQ_RESULT).OTHER
    assert adder.add_one_req(SimpleNamespace(rid="new")) is other
    assert adder.add_one_req(SimpleNamespace(rid="retracted")) == "admitted"
    state._apply(ControlState(version=2, paused=False))
    assert adder.add_one_req(SimpleNamespace(rid="new")) == "admitted"


def test_a_drain_sorts_calls_that_ran_ahead_of_the_ones_it_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang's admission loop stops at the first call the adder refuses: a retracted call
    ranked behind a newcomer would wait out the drain, which waits for it."""
    now = time.time()
    retracted, new = _waiting("old", 100.0, now - 20), _waiting("new", 0.1, now - 1)
    control = ControlState(version=1, paused=True, preempted={retracted.rid: now - 1.0})
    write_json_atomic(tmp_path / CONTROL_FILE, control.to_json())
    state = PluginState(tmp_path, Layout(tp_size=1, tp_rank=0))
    state.requests.seen_running(retracted.rid, now - 10)  # it ran before the drain
    waiting = [new, retracted]
    state.sort_waiting(waiting, now)
    assert state.paused
    assert [r.rid for r in waiting] == [retracted.rid, new.rid]
    admit = symbols.load(symbols.ADD_REQ_RESULT).CONTINUE
    monkeypatch.setattr(
        symbols.load(symbols.PREFILL_ADDER), "add_one_req", lambda self, req, *a, **k: admit
    )
    adder: Any = object.__new__(plugin._adder_class(state))
    admitted = []
    for req in waiting:  # SGLang 0.5.23's admission loop: it stops at the first refusal
        if adder.add_one_req(req) != admit:
            break
        admitted.append(req.rid)
    assert admitted == [retracted.rid]
    state._apply(ControlState(version=2, paused=False))
    state.sort_waiting(waiting, now)
    assert [r.rid for r in waiting] == [new.rid, retracted.rid]  # by rank again
