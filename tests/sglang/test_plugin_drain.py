"""The plugin's drain gate in SGLang's ``PrefillAdder`` (``plugin._adder_class``), without an
engine: a drain admits no new call, and a call that already ran (SGLang retracted it under
memory pressure, or an operator preempt did) is admitted again, or the drain never ends."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentconsole.server.runtime.sglang import plugin, symbols
from agentconsole.server.runtime.sglang.control import CONTROL_FILE, ControlState, write_json_atomic
from agentconsole.server.runtime.sglang.plugin_state import PluginState

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
