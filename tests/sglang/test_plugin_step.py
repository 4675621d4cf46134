"""What the plugin does with each measured step (``PluginState.on_step``), without SGLang:
the step's seconds are credited to tenants in proportion to the tokens their requests
computed (one credit per tenant, the same as one per request), and the forward phase notes
each running program's last context for the tool-wait retention."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from agentconsole.server.runtime.sglang.control import CONTROL_FILE, ControlState, write_json_atomic
from agentconsole.server.runtime.sglang.lockstep import Layout
from agentconsole.server.runtime.sglang.plugin_state import PluginState
from tests.sglang.test_lockstep_units import BASE, _batch, _req


def _state(tmp_path: Path) -> PluginState:
    write_json_atomic(tmp_path / CONTROL_FILE, ControlState(version=1).to_json())
    return PluginState(tmp_path, Layout(tp_size=1, tp_rank=0))


TENANTS = ("a", "b", "a", "c", "b", "a")  # of the requests, in batch order


def _requests() -> list[Any]:
    rnd = random.Random(3)
    return [_req(n, tenant, BASE, rnd) for n, tenant in enumerate(TENANTS)]


def test_a_step_is_credited_to_tenants_by_the_tokens_they_computed(tmp_path: Path) -> None:
    state = _state(tmp_path)
    reqs = _requests()
    state.on_step(_batch(reqs, prefill=True), 0.0, 0.3, forward=True)
    state.on_step(_batch(reqs, prefill=True), 0.0, 0.1, forward=False)
    tokens = {"a": 0, "b": 0, "c": 0}
    for r, tenant in zip(reqs, TENANTS, strict=True):
        tokens[tenant] += len(r.origin_input_ids)
    total = sum(tokens.values())
    for tenant, n in tokens.items():
        assert state.meter.service_s[tenant] == pytest.approx(0.4 * n / total)
    state.on_step(_batch(reqs, prefill=False), 0.0, 0.06, forward=True)  # a decode step
    for tenant in tokens:
        per_request = 0.06 / len(reqs)
        count = TENANTS.count(tenant)
        expected = 0.4 * tokens[tenant] / total + per_request * count
        assert state.meter.service_s[tenant] == pytest.approx(expected)


def test_the_forward_notes_each_programs_context_and_the_result_phase_adds_none(
    tmp_path: Path,
) -> None:
    state = _state(tmp_path)
    reqs = _requests()
    state.on_step(_batch(reqs[:4], prefill=False), 0.0, 0.02, forward=True)
    contexts = state.retention.contexts
    assert list(contexts) == [r.rid.split("/")[0] for r in reqs[:4]]
    assert contexts["p2"].origin is reqs[2].origin_input_ids  # by reference
    assert contexts["p2"].output is reqs[2].output_ids
    assert all(r.rid in state.requests.admitted for r in reqs[:4])
    # the result phase processes what the forward ran: it notes nothing new
    state.on_step(_batch(reqs, prefill=False), 0.0, 0.01, forward=False)
    assert len(contexts) == 4
    assert state.meter.service_s  # but its seconds are credited
