"""Parsing API JSON: full objects, missing fields, wrong types and opaque priority keys."""

from __future__ import annotations

from agentconsole.ui.client.door import Door, LearnedKind
from agentconsole.ui.client.models import AuditEntry, KVState, Overview, compact
from agentconsole.ui.client.programs import ProgramDetail, ProgramSummary
from tests.ui.stub_world import BIG_PROGRAM, StubWorld


def test_overview_round_trip_from_stub() -> None:
    body = StubWorld().overview_json()
    o = Overview.parse(body)
    assert o.policy == "cp-cache"
    assert [t.tier for t in o.kv] == ["hbm", "dram", "disk"]
    assert o.programs["running"] == body["programs"]["running"]
    assert 0 < o.kv[0].fraction <= 1


def test_missing_and_mistyped_fields_fall_back_to_defaults() -> None:
    o = Overview.parse({"policy": 3, "queue_depth": "many", "kv": None, "e2e_p50_s": None})
    assert o.policy == "3"
    assert o.queue_depth == 0
    assert o.kv == ()
    assert o.e2e_p50_s is None
    assert Overview.parse(None).runtime == "?"


def test_priority_key_display_and_sort_key() -> None:
    row = ProgramSummary.parse({"program_id": "p", "priority_key": [1, 0.123456, "x"]})
    assert row.priority == "1, 0.123, x"
    assert row.priority_sort == (1.0, 0.123456)
    assert ProgramSummary.parse({"priority_key": None}).priority == "-"
    assert ProgramSummary.parse({"priority_key": 2.5}).priority_sort == (2.5,)


def test_program_detail_nodes_edges_and_critical_path() -> None:
    world = StubWorld()
    body = world.program_json(BIG_PROGRAM)
    assert body is not None
    detail = ProgramDetail.parse(body)
    assert len(detail.nodes) >= 200
    assert detail.critical_path[0] == "n0"
    assert all(n.timeline for n in detail.nodes if n.state == "done")
    assert ("n0", "n1") in detail.edges


def test_edges_fall_back_to_node_parents() -> None:
    detail = ProgramDetail.parse(
        {"nodes": [{"node_id": "a"}, {"node_id": "b", "parents": ["a"]}], "edges": None}
    )
    assert detail.edges == (("a", "b"),)


def test_kv_and_audit() -> None:
    kv = KVState.parse(StubWorld().kv_json())
    assert kv.migrations == 37
    assert kv.retained
    assert kv.placement
    entry = AuditEntry.parse({"ts": 1.5, "action": "boost", "args": {"amount": 2.0}})
    assert entry.args == "amount=2"
    assert compact([1, {"a": None}]) == "1,a="


def test_door_unsized_missing_fields_and_a_peak_without_a_run() -> None:
    door = Door.parse(
        {
            "enabled": False,
            "budget_tokens": None,
            "runs": [{"tenant": "t", "kind": "chat", "expected_run_s": 4.5}, "junk"],
            "peaks": [
                {"tenant": "t", "kind": "chat", "peak_private_tokens": 800.5},
                {"tenant": "u", "kind": "chat", "peak_private_tokens": 99.0},  # another's
                {"tenant": "t", "kind": "batch", "peak_private_tokens": 1200},
                {"tenant": "t", "kind": "odd"},  # no number: not a learned peak
            ],
        }
    )
    assert not door.sized
    assert door.fill is None
    assert (door.order, door.waiting, door.predicted_tokens) == ("?", 0, 0)
    assert door.reserved_tokens == 0  # a server that does not say keeps no room it shows
    assert door.learned() == (
        LearnedKind("t", "chat", 4.5, 800.5),
        LearnedKind("t", "batch", None, 1200.0),
        LearnedKind("u", "chat", None, 99.0),
    )
    assert Door.parse({"budget_tokens": 0}).sized
    assert Door.parse({"budget_tokens": 0}).fill is None  # sized to nothing: no share
    assert Door.parse(None).learned() == ()
