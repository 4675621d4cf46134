"""What crosses the process boundary: tickets in ``custom_params``, the cache salt, the control
and status files, and the eviction classes (no engine needed)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.control import (
    CachedJsonFile,
    ControlState,
    ControlWriter,
    RetentionHint,
    read_json,
)
from agentconsole.server.runtime.sglang.retention import (
    CLASS_DROPPED,
    CLASS_KEPT,
    CLASS_NORMAL,
    DROPPED,
    node_class,
)
from agentconsole.server.runtime.sglang.status import QueuedEntry, RunningEntry, SchedulerStatus

finite = st.floats(-1e6, 1e6, allow_nan=False)


@given(
    st.builds(
        CallTicket,
        call_id=st.text(min_size=1),
        program_id=st.text(),
        node_id=st.text(),
        tenant=st.text(),
        arrival=finite,
        completed_calls=st.integers(0, 100),
        remaining_cp_s=finite,
        boost=finite,
        deadline=st.none() | finite,
    ),
    finite,
)
def test_ticket_round_trips_through_custom_params(ticket: CallTicket, offset: float) -> None:
    params = wire.encode(ticket, clock_offset=offset)
    assert set(params) == {wire.PARAMS_KEY}  # one namespaced key: other users are left alone
    decoded = wire.decode(params)
    assert decoded is not None
    assert decoded.ticket == ticket
    assert decoded.clock_offset == offset
    assert decoded.kind is wire.CallKind.CALL
    assert decoded.now(10.0) == 10.0 + offset


def test_decode_never_raises_on_foreign_params() -> None:
    for params in (
        None,
        "x",
        {},
        {"agentconsole": 3},
        {"agentconsole": {"v": 99, "ticket": {}}},
        {"agentconsole": {"v": 1, "ticket": {"call_id": "a"}}},  # missing required fields
        {"agentconsole": {"v": 1, "kind": "bogus", "ticket": {}}},
        {"agentconsole": {"v": 1, "clock_offset": "nan?", "ticket": {}}},
    ):
        assert wire.decode(params) is None


def test_cache_salt_is_the_tenant_unless_the_whole_prompt_is_public() -> None:
    assert wire.cache_salt("acme", prompt_chars=10, public_prefix_chars=0) == "t:acme"
    assert wire.cache_salt("acme", prompt_chars=10, public_prefix_chars=4) == "t:acme"
    assert wire.cache_salt("acme", prompt_chars=10, public_prefix_chars=10) == wire.PUBLIC_SALT
    assert wire.cache_salt("", prompt_chars=3, public_prefix_chars=0) == "t:"  # never unsalted
    assert wire.cache_salt("public", prompt_chars=3, public_prefix_chars=0) != wire.PUBLIC_SALT


@given(finite | st.just(math.inf) | st.just(math.nan))
def test_static_priority_is_bounded(boost: float) -> None:
    t = CallTicket("a/b/1", "a", "b", "t", arrival=0.0, boost=boost)
    p = wire.static_priority(t)
    assert -wire.PRIORITY_LIMIT <= p <= wire.PRIORITY_LIMIT


def test_control_state_round_trips_and_versions_grow(tmp_path: Path) -> None:
    writer = ControlWriter(tmp_path)
    writer.state.boosts["p"] = 2.5
    writer.state.retention["p"] = RetentionHint("keep", 12.5, 3)
    writer.state.fairness = {"beta": 4.0, "tenant_weights": {"a": 2.0}}
    version = writer.write()
    data = read_json(writer.path)
    assert data is not None
    back = ControlState.from_json(data)
    assert back == writer.state
    assert version == 2  # the constructor wrote version 1
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temp files left


def test_cached_file_rereads_only_changes(tmp_path: Path) -> None:
    writer = ControlWriter(tmp_path)
    cached = CachedJsonFile(writer.path, min_interval_s=0.0)
    data, changed = cached.poll(1.0)
    assert changed
    assert data is not None
    assert data["version"] == 1
    assert cached.poll(2.0) == (data, False)
    writer.state.policy = "fcfs"
    writer.write()
    os.utime(writer.path, ns=(1, 10**18))  # make sure the mtime differs even on coarse clocks
    data, changed = cached.poll(3.0)
    assert changed
    assert data is not None
    assert data["policy"] == "fcfs"
    limited = CachedJsonFile(writer.path, min_interval_s=10.0)
    limited.poll(0.0)
    writer.write()
    assert limited.poll(1.0)[1] is False  # too soon to look again


def test_status_round_trips_and_ages_waits() -> None:
    status = SchedulerStatus(
        pid=7,
        written_at=100.0,
        queued=[QueuedEntry("p/n/1", "p", "t", 2, 1.5, 0.25)],
        running=[RunningEntry("q/n/1", "q", "t", 50, 10, 1.0)],
        kv_used_tokens=60,
        kv_capacity_tokens=4096,
        kv_bytes_per_token=512,
        retained_tokens={"p": 40},
    )
    back = SchedulerStatus.from_json(status.to_json())
    assert back == status
    (q,) = back.queued_calls(now=101.0)
    assert q.call_id == "p/n/1"
    assert abs(q.waited_s - 1.25) < 1e-9
    assert back.device_tier().used_bytes == 60 * 512
    assert back.running_calls()[0].context_tokens == 50


def test_eviction_classes() -> None:
    assert node_class(None, 10.0) == CLASS_NORMAL
    assert node_class(20.0, 10.0) == CLASS_KEPT
    assert node_class(5.0, 10.0) == CLASS_NORMAL  # retention decays at its deadline
    assert node_class(DROPPED, 10.0) == CLASS_DROPPED
    assert CLASS_DROPPED < CLASS_NORMAL < CLASS_KEPT  # smaller is evicted first
