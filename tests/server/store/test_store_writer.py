"""The single writer: ordering, acknowledgement after commit, isolation, liveness, close."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentconsole.scheduler.events import Event, EventKind, EventSink
from agentconsole.server.live.hub import EventHub
from agentconsole.server.store import OperatorAction, Store, StoreClosedError, StoreConfig, bulk
from agentconsole.server.store import batch as batch_module
from agentconsole.server.store.event_log import EVENTS
from agentconsole.server.store.sqlconn import SqlConnection
from tests.server.store.store_helpers import GatedConnection, make_event


def _seqs(store: Store) -> list[int]:
    with store.cursor() as cur:
        return [int(r[0]) for r in cur.execute(f"SELECT seq FROM {EVENTS} ORDER BY seq").fetchall()]


def test_events_round_trip_in_order_without_loss_duplicates_or_gaps(store: Store) -> None:
    n = 5000
    producers = 4

    def produce(worker: int) -> list[int]:
        futures = [store.writer.append(make_event(worker * n + i)) for i in range(n // producers)]
        return [f.result(timeout=30) for f in futures]

    with ThreadPoolExecutor(producers) as pool:
        acked = [seq for seqs in pool.map(produce, range(producers)) for seq in seqs]
    assert sorted(acked) == list(range(1, n + 1))
    assert _seqs(store) == list(range(1, n + 1))
    stored = store.repo.events_since(0, limit=n)
    by_seq = {s.seq: s.event for s in stored}
    # Within one producer, queue order is seq order: event ids increase with seq.
    for worker in range(producers):
        ids = [int(s.event.data["i"] or 0) for s in stored]
        mine = [i for i in ids if worker * n <= i < (worker + 1) * n]
        assert mine == sorted(mine)
        assert len(mine) == n // producers
    assert by_seq[acked[0]] == make_event(0)


def test_writer_is_an_event_sink_and_emit_is_durable_after_flush(store: Store) -> None:
    sink: EventSink = store.writer
    for i in range(300):
        sink.emit(make_event(i))
    store.writer.flush().result(timeout=30)
    assert _seqs(store) == list(range(1, 301))
    assert store.writer.stats.events_written == 300


def test_ack_resolves_only_after_the_batch_commits(store: Store) -> None:
    gate, entered = threading.Event(), threading.Event()

    def block(_: SqlConnection) -> None:
        entered.set()
        gate.wait(10)

    def actions() -> int:
        with store.cursor() as cur:
            row = cur.execute("SELECT count(*) FROM operator_actions").fetchone()
            return int(row[0]) if row else 0

    # the blocker and the acknowledged write share the main lane (events have a lane of their
    # own, which a blocked main lane does not hold back)
    blocker = store.writer.call(block)
    assert entered.wait(10)
    future = store.writer.put_durable(OperatorAction(1.0, "alice", "drain", "w", "ok"))
    time.sleep(0.05)
    assert not future.done()
    assert actions() == 0  # nothing visible to readers: not committed
    gate.set()
    future.result(timeout=10)
    blocker.result(timeout=10)
    assert actions() == 1
    assert store.writer.stats.busy_since is None


def test_a_failing_item_fails_alone(store: Store) -> None:
    def boom(_: SqlConnection) -> None:
        raise ValueError("bad op")

    gate = threading.Event()
    store.writer.call(lambda _: gate.wait(10))
    before = store.writer.append(make_event(1))
    bad = store.writer.call(boom)
    after = store.writer.append(make_event(2))
    gate.set()
    assert before.result(timeout=10) == 1
    assert after.result(timeout=10) == 2
    with pytest.raises(ValueError, match="bad op"):
        bad.result(timeout=10)
    assert store.writer.stats.failed_items == 1
    assert store.writer.alive


def test_fatal_error_kills_writer_and_fails_pending_work(db_path: Path) -> None:
    store = Store.open(db_path)
    gate = threading.Event()

    def fatal(_: SqlConnection) -> None:
        gate.wait(10)
        raise duckdb.FatalException("database has been invalidated")

    dying = store.writer.call(fatal)
    queued = store.writer.put_durable(OperatorAction(1.0, "alice", "drain", "w", "ok"))
    gate.set()
    with pytest.raises(StoreClosedError):
        dying.result(timeout=10)
    with pytest.raises(StoreClosedError):
        queued.result(timeout=10)
    assert not store.writer.alive
    with pytest.raises(StoreClosedError, match="died"):
        store.writer.append(make_event(2))  # the event lane stopped with the main lane
    with pytest.raises(StoreClosedError, match="died"):
        store.writer.flush()
    store.writer.emit(make_event(3))
    assert store.writer.stats.dropped == 1
    assert store.close() is False
    with Store.open(db_path) as again:  # the file is fine; the instance was not
        assert again.writer.alive


def test_full_queue_drops_fire_and_forget_events_and_counts_them(db_path: Path) -> None:
    with Store.open(db_path, StoreConfig(max_queue=0)) as store:
        for i in range(10):
            store.writer.emit(make_event(i))
        assert store.writer.stats.dropped == 10
        # the dropped events' numbers stay theirs: a gap, as for an event that failed alone
        assert store.writer.append(make_event(99)).result(timeout=10) == 11


def test_events_dropped_at_a_full_queue_keep_every_later_event_on_its_hub_seq(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub numbers events as it emits them; the writer must number the ones it stores
    alike, dropped ones between them or not (before, every event after a drop was stored
    under a lower seq than the hub's, and a restart skipped events past the sync marks)."""
    real = bulk.insert_events
    writing, gate = threading.Event(), threading.Event()

    def held(con: SqlConnection, events: Any, first_seq: int) -> None:
        writing.set()
        gate.wait(10)  # the lane is busy with its first batch while the queue fills
        real(con, events, first_seq)

    monkeypatch.setattr(batch_module, "insert_events", held)
    with Store.open(db_path, StoreConfig(max_queue=3, event_linger_s=0)) as store:
        hub = EventHub(first_seq=store.repo.last_seq() + 1)
        hub.subscribe(store.writer.emit)
        hub.emit(make_event(0))
        assert writing.wait(10)
        for i in range(1, 10):
            hub.emit(make_event(i))  # three queued, six dropped
        gate.set()
        store.writer.flush().result(timeout=10)
        hub.emit(make_event(10))
        store.writer.flush().result(timeout=10)
        assert store.writer.stats.dropped == 6
        stored = {e.event.node_id: e.seq for e in store.repo.events_since(0)}
    assert stored == {f"n{i}": i + 1 for i in (0, 1, 2, 3, 10)}


def test_an_event_that_slips_past_the_closed_check_is_counted_not_lost(db_path: Path) -> None:
    store = Store.open(db_path)
    lane = store.writer._events
    assert store.close() is True
    # offer() checks "closed" without a lock: simulate an emit that passed that check just
    # before the lane's last drain (the lane closes between the check and the put), and one
    # whose put lands while join() runs
    real_queue = lane._queue

    class ClosingBeforePut:
        def qsize(self) -> int:
            return real_queue.qsize()

        def put(self, item: object) -> None:
            lane._closing = True
            real_queue.put(item)

        def get_nowait(self) -> object:
            return real_queue.get_nowait()

    lane._closing = False
    lane._queue = cast(Any, ClosingBeforePut())
    store.writer.emit(make_event(1))
    lane._queue = real_queue
    assert store.writer.stats.dropped == 1
    lane._queue.put(make_event(2))
    assert lane.join(1) is True
    assert store.writer.stats.dropped == 2
    assert lane.queue_depth == 0


def test_close_drains_the_queue_and_later_writes_are_refused(db_path: Path) -> None:
    store = Store.open(db_path)
    for i in range(20_000):
        store.writer.emit(make_event(i))
    assert store.close() is True
    assert store.close() is True
    assert not store.writer.alive
    with pytest.raises(StoreClosedError):
        store.writer.flush()
    with pytest.raises(StoreClosedError):
        store.repo.last_seq()
    assert not Path(f"{db_path}.wal").exists()  # checkpointed at shutdown
    with Store.open(db_path) as again:
        assert again.repo.last_seq() == 20_000
        assert again.writer.append(make_event(1)).result(timeout=10) == 20_001


def test_stats_report_liveness(store: Store) -> None:
    assert store.writer.alive
    assert store.writer.stats.last_commit_wall is None
    store.writer.append(make_event(1)).result(timeout=10)
    stats = store.writer.stats
    assert stats.last_commit_wall is not None
    assert stats.batches >= 1
    assert stats.stuck_for() == 0.0


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
_events = st.builds(
    Event,
    t=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    kind=st.sampled_from(list(EventKind)),
    program_id=st.text(max_size=12),
    node_id=st.text(max_size=12),
    attempt=st.integers(min_value=0, max_value=2**31 - 1),
    tenant=st.text(max_size=8),
    data=st.dictionaries(st.text(max_size=8), _scalars, max_size=5),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(_events, min_size=1, max_size=40))
def test_any_events_read_back_equal(store: Store, batch: list[Event]) -> None:
    start = store.repo.last_seq()
    for event in batch[:-1]:
        store.writer.emit(event)
    last = store.writer.append(batch[-1]).result(timeout=10)
    assert last == start + len(batch)
    stored = store.repo.events_since(start, limit=len(batch) + 1)
    assert [s.seq for s in stored] == list(range(start + 1, last + 1))
    assert [s.event for s in stored] == batch


def test_non_finite_floats_are_stored_as_null(store: Store) -> None:
    event = Event(t=1.0, kind=EventKind.CALL_FAILED, data={"a": float("nan"), "b": 1.5})
    seq = store.writer.append(event).result(timeout=10)
    (stored,) = store.repo.events_since(seq - 1)
    assert stored.event.data == {"a": None, "b": 1.5}


def test_a_death_in_one_lane_settles_every_future_of_the_other(db_path: Path) -> None:
    store = Store.open(db_path, StoreConfig(max_batch_rows=10))
    lane = store.writer._events
    gated = GatedConnection(lane._con, "BEGIN")
    lane._con = cast(SqlConnection, gated)
    first = store.writer.append(make_event(0))
    assert gated.entered.wait(10)  # the event lane is inside a batch
    backlog = [store.writer.append(make_event(i)) for i in range(1, 51)]  # five batches' worth
    barrier = store.writer.flush()

    def fatal(_: SqlConnection) -> None:
        raise duckdb.FatalException("database has been invalidated")

    with pytest.raises(StoreClosedError):
        store.writer.call(fatal).result(timeout=10)
    gated.gate.set()
    futures: list[Future[Any]] = [first, *backlog, barrier]
    for future in futures:
        with contextlib.suppress(StoreClosedError):  # committed before the abort, or failed
            future.result(timeout=10)  # ... but never left hanging
    assert not store.writer.alive
    assert store.close() is False


def test_the_event_linger_gathers_fire_and_forget_events_and_never_holds_an_ack(
    db_path: Path,
) -> None:
    # A linger far longer than any wait below: finishing at all proves it was cut short.
    with Store.open(db_path, StoreConfig(event_linger_s=30.0)) as store:
        started = time.monotonic()
        assert store.writer.append(make_event(0)).result(timeout=10) == 1
        assert time.monotonic() - started < 10  # an ack to an idle lane does not linger
        before = store.writer.stats.batches
        for i in range(1, 201):
            store.writer.emit(make_event(i))
        time.sleep(0.2)  # the lane is lingering now, gathering the events
        assert store.writer.stats.batches == before
        # an ack that arrives during the linger ends it and rides in the same commit
        assert store.writer.append(make_event(201)).result(timeout=10) == 202
        assert store.writer.stats.batches - before <= 2  # a batch or two, not 201
        store.writer.emit(make_event(202))
        time.sleep(0.1)
        started = time.monotonic()
    # closing during a linger does not wait it out, and commits what was gathered
    assert time.monotonic() - started < 10
    with Store.open(db_path) as reopened:
        assert reopened.repo.last_seq() == 203


def test_a_backlog_of_full_batches_is_written_without_lingering(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = bulk.insert_events
    writing, gate = threading.Event(), threading.Event()

    def held(con: SqlConnection, events: Any, first_seq: int) -> None:
        writing.set()
        gate.wait(10)  # the lane is busy with the first batch while the backlog is queued
        real(con, events, first_seq)

    monkeypatch.setattr(batch_module, "insert_events", held)
    config = StoreConfig(event_linger_s=30.0, max_batch_rows=100)
    with Store.open(db_path, config) as store:
        first = store.writer.append(make_event(0))
        assert writing.wait(10)
        for i in range(1, 1001):  # ten full batches queued at once (before, the lane could
            store.writer.emit(make_event(i))  # wake on the first few on a loaded host)
        gate.set()
        assert first.result(timeout=10) == 1
        deadline = time.monotonic() + 10
        while store.writer.stats.events_written < 901 and time.monotonic() < deadline:
            time.sleep(0.01)
        # every full batch went at once; only the last, once the queue is short, lingers
        assert store.writer.stats.events_written >= 901


def test_an_event_that_fails_alone_keeps_its_number(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub numbers events as it emits them and the writer numbers them in the same order:
    an event dropped by a lasting, non-fatal error must leave a gap, or every later event's
    store seq falls behind its hub seq (restarts then skip events past the sync marks)."""
    real = bulk.insert_events  # what the batch module calls, by its own name

    def failing(con: SqlConnection, events: Any, first_seq: int) -> None:
        if any(e.data.get("i") == 2 for e in events):
            raise duckdb.IOException("disk full")
        real(con, events, first_seq)

    monkeypatch.setattr(batch_module, "insert_events", failing)
    gate = threading.Event()
    store.writer.call(lambda _: gate.wait(10))
    futures = [store.writer.append(make_event(i)) for i in (1, 2, 3, 4)]
    gate.set()
    assert futures[0].result(timeout=10) == 1
    with pytest.raises(duckdb.IOException):
        futures[1].result(timeout=10)
    assert [f.result(timeout=10) for f in futures[2:]] == [3, 4]
    assert _seqs(store) == [1, 3, 4]
    assert store.writer.alive


def test_an_event_with_an_unpaired_surrogate_is_stored(store: Store) -> None:
    cut = Event(1.0, EventKind.PROGRAM_CREATED, "p", data={"error": "cut \ud83d"})
    assert store.writer.append(cut).result(timeout=10) == 1
    (stored,) = store.repo.events_since(0)
    assert stored.event.data == {"error": "cut \ufffd"}


def test_one_bad_item_among_many_is_found_by_halves(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = bulk.insert_events

    def failing(con: SqlConnection, events: Any, first_seq: int) -> None:
        if any(e.data.get("i") == 37 for e in events):
            raise ValueError("bad event")
        real(con, events, first_seq)

    monkeypatch.setattr(batch_module, "insert_events", failing)
    gate = threading.Event()
    store.writer.call(lambda _: gate.wait(10))
    store.writer.flush(events=False)
    futures = [store.writer.append(make_event(i)) for i in range(64)]
    batches = store.writer.stats.batches
    gate.set()
    with pytest.raises(ValueError, match="bad event"):
        futures[37].result(timeout=10)
    assert [f.result(timeout=10) for f in futures if f is not futures[37]] == [
        i + 1 for i in range(64) if i != 37
    ]
    assert store.writer.stats.batches - batches <= 2 * 6  # not one commit per event


def test_a_failed_statement_raises_its_own_error_not_the_aborted_transactions() -> None:
    con = duckdb.connect()
    con.execute("ATTACH ':memory:' AS event_log")
    con.execute(
        f"CREATE TABLE {EVENTS} (seq BIGINT, ts DOUBLE CHECK (ts >= 0), kind VARCHAR,"
        " program_id VARCHAR, node_id VARCHAR, attempt INTEGER, tenant VARCHAR, data JSON)"
    )
    con.execute("BEGIN TRANSACTION")
    with pytest.raises(duckdb.ConstraintException):
        bulk.insert_events(con, [Event(-1.0, EventKind.PROGRAM_CREATED, "p")], 1)
