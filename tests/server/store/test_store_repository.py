"""Current-state upserts and the read queries the API needs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentconsole.scheduler.events import Event, EventKind, Scalar
from agentconsole.server.live.doorwaits import door_spans
from agentconsole.server.live.pagecursor import ProgramCursor
from agentconsole.server.store import (
    ApiKeyRecord,
    AttemptRecord,
    MetricSample,
    NodeRecord,
    OperatorAction,
    ProgramRecord,
    Store,
    TenantRecord,
    ToolRecord,
)
from agentconsole.server.store.repository import DoorWait, RestartEvents
from tests.server.store.store_helpers import make_event


def _program(
    pid: str, tenant: str, state: str, t: float, labels: tuple[str, ...] = ()
) -> ProgramRecord:
    return ProgramRecord(
        pid, tenant, state, created_at=t, updated_at=t, labels=labels, data={"priority": t}
    )


def test_upserts_keep_one_row_per_key_last_write_wins(store: Store) -> None:
    store.writer.put(_program("p1", "a", "queued", 1.0))
    store.writer.put(_program("p1", "a", "running", 1.0))
    store.writer.flush().result(10)  # a later batch replaces the stored row too
    store.writer.put_durable(_program("p1", "a", "finished", 1.0, ("done",))).result(10)
    with store.cursor() as cur:
        assert cur.execute("SELECT count(*) FROM programs").fetchone() == (1,)
    view = store.repo.get_program("p1")
    assert view is not None
    assert (view.program.state, view.program.labels) == ("finished", ("done",))
    assert view.program.data == {"priority": 1.0}


def test_get_program_returns_nodes_and_attempts(store: Store) -> None:
    store.writer.put(_program("p1", "a", "running", 1.0))
    store.writer.put(NodeRecord("p1", "n2", "tool", "waiting", 3.0, 3.0, parents=("n1",)))
    store.writer.put(NodeRecord("p1", "n1", "llm", "done", 2.0, 2.0))
    store.writer.put(NodeRecord("p1", "n1", "llm", "done", 2.0, 4.0, attempt=1))
    store.writer.put(NodeRecord("other", "n1", "llm", "done", 2.0, 2.0))
    store.writer.put(AttemptRecord("p1", "n1", 0, "failed", 2.0, 2.5, {"error": "x"}))
    store.writer.put(AttemptRecord("p1", "n1", 1, "done", 2.6, 3.0))
    store.writer.flush().result(10)
    view = store.repo.get_program("p1")
    assert view is not None
    assert [(n.node_id, n.attempt, n.parents) for n in view.nodes] == [
        ("n1", 1, ()),
        ("n2", 0, ("n1",)),
    ]
    assert [(a.attempt, a.state, a.finished_at) for a in view.attempts] == [
        (0, "failed", 2.5),
        (1, "done", 3.0),
    ]
    assert store.repo.get_program("missing") is None


def test_list_programs_filters_by_tenant_state_and_label(store: Store) -> None:
    for i, (tenant, state, labels) in enumerate(
        [
            ("a", "running", ("x",)),
            ("a", "finished", ("x", "y")),
            ("b", "running", ("y",)),
        ]
    ):
        store.writer.put(_program(f"p{i}", tenant, state, float(i), labels))
    store.writer.flush().result(10)

    def ids(rows: list[ProgramRecord]) -> list[str]:
        return [r.program_id for r in rows]

    assert ids(store.repo.list_programs()) == ["p2", "p1", "p0"]
    assert ids(store.repo.list_programs(tenant="a")) == ["p1", "p0"]
    assert ids(store.repo.list_programs(state="running")) == ["p2", "p0"]
    assert ids(store.repo.list_programs(label="y")) == ["p2", "p1"]
    assert ids(store.repo.list_programs(tenant="a", label="y", state="finished")) == ["p1"]
    assert ids(store.repo.list_programs(limit=1, offset=1)) == ["p1"]


def test_list_programs_after_a_keyset_position_walks_every_row_once(store: Store) -> None:
    """Ties on ``created_at`` break by id; a float that is no short decimal (``0.1 + 0.2``)
    still compares equal to itself through the cursor's text, so no row is lost at a page
    edge; a position that no longer exists (its program left the filter) still places the
    rest."""
    times = [0.1 + 0.2, 0.1 + 0.2, 0.1 + 0.2, 1.0, 1.0, 2.5, 1796478867.2048428]
    for i, t in enumerate(times):
        store.writer.put(_program(f"k{i}", "a", "running" if i % 3 else "finished", t))
    store.writer.flush().result(10)
    whole = [r.program_id for r in store.repo.list_programs(limit=100)]
    assert whole == ["k6", "k5", "k3", "k4", "k0", "k1", "k2"]
    for size in (1, 2, 3):
        walked: list[str] = []
        after: tuple[float, str] | None = None
        while page := store.repo.list_programs(limit=size, after=after):
            walked += [r.program_id for r in page]
            last = ProgramCursor.decode(
                ProgramCursor(page[-1].created_at, page[-1].program_id).encode()
            )
            after = last.key
        assert walked == whole
    # k3 is finished: the running rows after its position are still exactly those after it
    running = [r.program_id for r in store.repo.list_programs(state="running", after=(1.0, "k3"))]
    assert running == ["k4", "k1", "k2"]


def test_events_since_pages_and_filters(store: Store) -> None:
    for i in range(50):
        store.writer.emit(make_event(i, tenant="a" if i % 2 else "b"))
    store.writer.flush().result(10)
    page = store.repo.events_since(10, limit=5)
    assert [e.seq for e in page] == [11, 12, 13, 14, 15]
    assert page[0].event == make_event(10, tenant="b")
    assert all(e.event.tenant == "a" for e in store.repo.events_since(0, tenant="a"))
    assert len(store.repo.events_since(0, tenant="a")) == 25
    assert [e.event.program_id for e in store.repo.events_since(0, program_id="p3")] == ["p3"] * 7
    assert store.repo.last_seq() == 50
    assert store.repo.events_since(50) == []


def _latest(
    store: Store, groups: Sequence[tuple[EventKind, tuple[str, ...]]], n: int
) -> list[Event]:
    """The learned half of the start-up's read of the log."""
    read = store.repo.restart_events(groups, n)
    assert read.door_waits == []  # none asked for
    return read.latest


def test_restart_events_keep_the_latest_of_each_tenant_and_group(store: Store) -> None:
    def finished(i: int, tenant: str, kind: str, label: str = "") -> Event:
        data: dict[str, Scalar] = {"program_kind": kind, "workload": label, "calls": i}
        data["door_run_s"] = float(i)
        return Event(float(i), EventKind.PROGRAM_FINISHED, f"p{i}", tenant=tenant, data=data)

    events = [finished(i, "a", "coding", "coding") for i in range(5)]
    events += [finished(5, "b", "coding", "coding"), finished(6, "a", "chat")]
    events.insert(3, Event(3.5, EventKind.PROGRAM_FAILED, "failed", tenant="a"))
    events.insert(1, make_event(99))
    for i, label in enumerate(("x", "y", "x")):  # failed programs, grouped by their label
        failed: dict[str, Scalar] = {"workload": label}
        events.append(
            Event(7.0 + i, EventKind.PROGRAM_FAILED, f"f{label}{i}", tenant="a", data=failed)
        )
    for event in events:
        store.writer.emit(event)
    store.writer.flush().result(10)
    by_kind_and_label = [(EventKind.PROGRAM_FINISHED, ("program_kind", "workload"))]
    recent = _latest(store, by_kind_and_label, 2)
    assert [e.program_id for e in recent] == ["p3", "p4", "p5", "p6"]  # oldest first
    assert recent[0] == finished(3, "a", "coding", "coding")
    assert type(recent[0].data["calls"]) is int  # as stored: a count stays a count
    assert type(recent[0].data["door_run_s"]) is float
    assert len(_latest(store, by_kind_and_label, 10)) == 7
    finished_per_tenant = _latest(store, [(EventKind.PROGRAM_FINISHED, ())], 1)
    assert len(finished_per_tenant) == 2  # one per tenant
    # several kinds in one scan, each grouped by its own fields; other kinds left out
    both = [*by_kind_and_label, (EventKind.PROGRAM_FAILED, ("workload",))]
    latest = [e.program_id for e in _latest(store, both, 1)]
    assert latest == ["failed", "p4", "p5", "p6", "fy1", "fx2"]  # the unlabelled, y, latest x
    assert _latest(store, [], 1) == []
    with pytest.raises(ValueError, match="each kind once"):
        _latest(store, [*both, (EventKind.PROGRAM_FAILED, ())], 1)


def _door_waited(t: float, program_id: str, door_s: Scalar | None, tenant: str = "a") -> Event:
    data: dict[str, Scalar] = {"at": "start", "ended": "let_in"}
    if door_s is not None:
        data["door_s"] = door_s
    return Event(t, EventKind.PROGRAM_DOOR_WAITED, program_id, tenant=tenant, data=data)


def test_restart_events_read_the_door_waits_in_the_same_scan(store: Store) -> None:
    finished: dict[str, Scalar] = {"program_kind": "chat", "workload": "chat", "calls": 1}
    events = [
        _door_waited(5.0, "early", 1.0),  # before the earliest creation asked for: left out
        _door_waited(11.0, "p", 0.5),
        Event(12.0, EventKind.PROGRAM_FINISHED, "done", tenant="a", data=finished),
        _door_waited(13.0, "other", 2.0),  # not asked for
        _door_waited(14.0, "q", 0.0),  # of no length
        _door_waited(15.0, "q", None),  # no length recorded
        _door_waited(16.0, "p", 1.5, tenant="b"),
        _door_waited(17.0, "q", 3.0),
    ]
    for event in events:
        store.writer.emit(event)
    store.writer.flush().result(10)
    learned = [(EventKind.PROGRAM_FINISHED, ("program_kind",))]
    asked = ["p", "q", "early"]
    read = store.repo.restart_events(learned, 1, door_waits_of=asked, door_since=10.0)
    assert [e.program_id for e in read.latest] == ["done"]  # door waits never count there
    assert read.door_waits == [
        DoorWait("p", 11.0, 0.5),
        DoorWait("p", 16.0, 1.5),
        DoorWait("q", 17.0, 3.0),
    ]
    assert door_spans(read.door_waits) == {"p": [(10.5, 11.0), (14.5, 16.0)], "q": [(14.0, 17.0)]}
    # the door waits alone; the learned kinds' window leaves them whole
    alone = store.repo.restart_events([], 1, door_waits_of=asked, door_since=10.0)
    assert alone == RestartEvents([], read.door_waits)
    assert store.repo.restart_events([], 1) == RestartEvents([], [])
    with pytest.raises(ValueError, match="read whole"):
        store.repo.restart_events([(EventKind.PROGRAM_DOOR_WAITED, ())], 1)


def test_audit_log_is_numbered_and_newest_first(store: Store) -> None:
    for i, actor in enumerate(["alice", "bob", "alice"]):
        store.writer.put_durable(
            OperatorAction(float(i), actor, "cancel", f"p{i}", "ok", {"reason": i})
        ).result(10)
    log = store.repo.audit_log()
    assert [(e.action_id, e.action.actor) for e in log] == [(3, "alice"), (2, "bob"), (1, "alice")]
    assert log[0].action.args == {"reason": 2}
    assert [e.action_id for e in store.repo.audit_log(actor="alice", before_id=3)] == [1]
    assert [e.action_id for e in store.repo.audit_log(target="p1")] == [2]


def test_tools_tenants_keys_and_metrics(store: Store) -> None:
    schema = '{"type": "object"}'
    store.writer.put(ToolRecord("search", "", schema, False, True, 5.0, 0.0, 0.0))
    store.writer.put(ToolRecord("mail", "", schema, True, False, 9.0, 0.0, 0.0))
    store.writer.put(ToolRecord("mail", "acme", schema, True, True, 3.0, 0.0, 0.0, ("send",)))
    store.writer.put(TenantRecord("acme", "Acme", 0.0, 0.0, weight=2.0, quotas={"tokens": 10}))
    store.writer.put(ApiKeyRecord("k1", "acme", "hash1", "tenant", 0.0))
    store.writer.put(ApiKeyRecord("k2", "acme", "hash2", "operator", 0.0, revoked_at=1.0))
    for i in range(3):
        store.writer.put(MetricSample(float(i), "goodput", float(i * 10), {"tenant": "acme"}))
    store.writer.flush().result(10)
    tools = {t.name: t for t in store.repo.tools("acme")}
    assert (tools["mail"].tenant, tools["mail"].timeout_s, tools["mail"].permissions) == (
        "acme",
        3.0,
        ("send",),
    )
    assert [t.tenant for t in store.repo.tools("other")] == ["", ""]
    assert store.repo.tenants()[0].quotas == {"tokens": 10}
    key = store.repo.api_key("hash1")
    assert key is not None
    assert key.role == "tenant"
    assert store.repo.api_key("hash2") is None
    assert [m.value for m in store.repo.metrics_since(0.0, name="goodput")] == [10.0, 20.0]
