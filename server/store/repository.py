"""Read queries the API and consoles need, each in one place.

Every method opens its own short-lived cursor on the writer's database instance (a separate
DuckDB connection, hence its own MVCC snapshot of committed data), so reads run in the
caller's thread in parallel with the writer and never delay a commit. Methods are safe to
call from any thread, including from a thread pool under asyncio.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind, Scalar
from agentconsole.server.store.catalog import ApiKeyRecord, TenantRecord, ToolRecord
from agentconsole.server.store.event_log import EVENT_SPEC, EVENTS
from agentconsole.server.store.intent_types import IntentRecord, IntentState
from agentconsole.server.store.journal import MetricSample, OperatorAction
from agentconsole.server.store.jsonutil import loads_object
from agentconsole.server.store.records import AttemptRecord, NodeRecord, ProgramRecord
from agentconsole.server.store.sqlconn import SqlConnection

CursorFactory = Callable[[], AbstractContextManager[SqlConnection]]


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event with the sequence number the writer gave it."""

    seq: int
    event: Event


@dataclass(frozen=True, slots=True)
class StoredAction:
    """An audited operator action with its id."""

    action_id: int
    action: OperatorAction


@dataclass(frozen=True, slots=True)
class ProgramView:
    """A program with its nodes (DAG order of creation) and every attempt of them."""

    program: ProgramRecord
    nodes: tuple[NodeRecord, ...]
    attempts: tuple[AttemptRecord, ...]


@dataclass(frozen=True, slots=True)
class DoorWait:
    """A program's wait at the door, as its ``program.door_waited`` event recorded it: ended
    at ``ended_at``, ``waited_s`` long."""

    program_id: str
    ended_at: float
    waited_s: float


@dataclass(frozen=True, slots=True)
class RestartEvents:
    """What a start-up reads back from the event log (:meth:`Repository.restart_events`)."""

    #: the latest events of each learned kind and group, oldest first
    latest: list[Event]
    #: the restored programs' waits at the door, in log order
    door_waits: list[DoorWait]


def _cols(names: tuple[str, ...]) -> str:
    return ", ".join(names)


_EVENT_COLS = _cols(EVENT_SPEC.names)
_DOOR_WAITED = EventKind.PROGRAM_DOOR_WAITED
_CALL_ENDS = (EventKind.CALL_FINISHED, EventKind.CALL_ABORTED, EventKind.CALL_FAILED)
_INTENT_COLS = _cols(IntentRecord.SPEC.names)


def _event(r: tuple[Any, ...]) -> StoredEvent:
    data = cast(Mapping[str, Scalar], loads_object(r[7]))
    event = Event(
        t=r[1],
        kind=EventKind(r[2]),
        program_id=r[3] or "",
        node_id=r[4] or "",
        attempt=r[5] or 0,
        tenant=r[6] or "",
        data=data,
    )
    return StoredEvent(seq=int(r[0]), event=event)


def _latest_window(groups: Sequence[tuple[EventKind, Sequence[str]]]) -> str:
    """The window that numbers each kind's events per tenant and values of the kind's fields
    in ``groups``, newest first (the kinds and field names are the scheduler's constants,
    never a client's text)."""
    width = max(len(fields) for _, fields in groups)
    by_field = [
        "CASE kind "
        + " ".join(
            f"WHEN '{kind.value}' THEN data->>'{fields[i]}'"
            for kind, fields in groups
            if i < len(fields)
        )
        + " END"
        for i in range(width)
    ]
    return f"PARTITION BY {', '.join(['kind', 'tenant', *by_field])} ORDER BY seq DESC"


def _restart_scan(
    groups: Sequence[tuple[EventKind, Sequence[str]]],
    per_group: int,
    door_waits_of: Sequence[str],
    door_since: float,
) -> tuple[str, list[object]]:
    """The query of :meth:`Repository.restart_events` and its parameters: one scan of the
    log, its filter an ``OR`` of the learned kinds and the door waits asked for."""
    where: list[str] = []
    params: list[object] = []
    if groups:
        where.append(f"kind IN ({', '.join('?' * len(groups))})")
        params.extend(kind.value for kind, _ in groups)
    if door_waits_of:
        # a semi-join on the unnested list: one hash join, not one lookup per id
        where.append("(kind = ? AND ts >= ? AND program_id IN (SELECT unnest(?::VARCHAR[])))")
        params.extend((_DOOR_WAITED.value, door_since, list(door_waits_of)))
    sql = f"SELECT {_EVENT_COLS} FROM {EVENTS} WHERE {' OR '.join(where)}"
    if groups:
        # the door waits pass whole; only the learned kinds keep their latest
        sql += f" QUALIFY kind = ? OR row_number() OVER ({_latest_window(groups)}) <= ?"
        params.extend((_DOOR_WAITED.value, per_group))
    return sql + " ORDER BY seq", params


R = TypeVar("R", NodeRecord, AttemptRecord)


def _by_program(records: Iterable[R]) -> dict[str, list[R]]:
    """``records`` grouped by program id, each group in the order read."""
    out: dict[str, list[R]] = {}
    for record in records:
        out.setdefault(record.program_id, []).append(record)
    return out


class Repository:
    """Typed read access to the store's tables."""

    def __init__(self, cursor: CursorFactory) -> None:
        self._cursor = cursor

    def _all(self, sql: str, params: list[object] | None = None) -> list[tuple[Any, ...]]:
        with self._cursor() as cur:
            return cur.execute(sql, params or []).fetchall()

    def get_program(self, program_id: str) -> ProgramView | None:
        """The program with its nodes and attempts, or ``None`` if unknown. The three reads
        share one snapshot."""
        return self._views("program_id = ?", program_id).get(program_id)

    def get_programs(self, program_ids: Sequence[str]) -> dict[str, ProgramView]:
        """Each of ``program_ids`` the store holds, as :meth:`get_program` reads it (an id it
        does not hold is left out): one read per table however many programs (a start-up
        reopens every running one), the three in one snapshot."""
        if not program_ids:
            return {}
        # a semi-join on the unnested list: one hash join, not one lookup per id
        return self._views("program_id IN (SELECT unnest(?::VARCHAR[]))", list(program_ids))

    def _views(self, where: str, param: object) -> dict[str, ProgramView]:
        """The programs whose rows match ``where`` (on ``program_id``, one ``?``), by id, each
        with its nodes and attempts in :class:`ProgramView`'s order; one snapshot."""
        p, n, a = ProgramRecord.SPEC, NodeRecord.SPEC, AttemptRecord.SPEC
        with self._cursor() as cur:
            cur.execute("BEGIN TRANSACTION")
            rows = cur.execute(f"SELECT {_cols(p.names)} FROM programs WHERE {where}", [param])
            programs = rows.fetchall()
            nodes = cur.execute(
                f"SELECT {_cols(n.names)} FROM nodes WHERE {where}"
                " ORDER BY program_id, created_at, node_id",
                [param],
            ).fetchall()
            attempts = cur.execute(
                f"SELECT {_cols(a.names)} FROM attempts WHERE {where}"
                " ORDER BY program_id, started_at, node_id, attempt",
                [param],
            ).fetchall()
            cur.execute("COMMIT")
        node_records = _by_program(NodeRecord.from_row(r) for r in nodes)
        attempt_records = _by_program(AttemptRecord.from_row(r) for r in attempts)
        views = {}
        for row in programs:
            record = ProgramRecord.from_row(row)
            pid = record.program_id
            views[pid] = ProgramView(
                record, tuple(node_records.get(pid, ())), tuple(attempt_records.get(pid, ()))
            )
        return views

    def program_owner(self, program_id: str) -> str | None:
        """The tenant the store holds ``program_id`` for, or ``None``."""
        rows = self._all("SELECT tenant FROM programs WHERE program_id = ? LIMIT 1", [program_id])
        return str(rows[0][0]) if rows else None

    def program_ids(self, chunk: int = 10_000) -> Iterator[str]:
        """Every stored program id, read ``chunk`` rows at a time."""
        with self._cursor() as cur:
            cur.execute("SELECT program_id FROM programs")
            while rows := cur.fetchmany(chunk):
                yield from (str(row[0]) for row in rows)

    def list_programs(
        self,
        *,
        tenant: str | None = None,
        state: str | None = None,
        label: str | None = None,
        limit: int = 100,
        offset: int = 0,
        after: tuple[float, str] | None = None,
    ) -> list[ProgramRecord]:
        """Programs matching every given filter, newest first (``created_at`` descending,
        then ``program_id`` ascending). ``label`` matches one entry of ``labels`` exactly.

        ``after`` is a keyset position ``(created_at, program_id)``, the sort key of the last
        row of an earlier page: only rows strictly after it in that order are returned, so a
        program that ends or starts between two page reads never shifts the rows that follow
        (an ``offset`` counts rows that may since have left or joined the filter)."""
        where: list[str] = ["TRUE"]
        params: list[object] = []
        for column, value in (("tenant", tenant), ("state", state)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if label is not None:
            where.append("list_contains(labels, ?)")
            params.append(label)
        if after is not None:
            # the sort's mixed directions rule out a row comparison: spelled out
            where.append("(created_at < ? OR (created_at = ? AND program_id > ?))")
            params.extend((after[0], after[0], after[1]))
        sql = (
            f"SELECT {_cols(ProgramRecord.SPEC.names)} FROM programs"
            f" WHERE {' AND '.join(where)} ORDER BY created_at DESC, program_id"
            " LIMIT ? OFFSET ?"
        )
        return [ProgramRecord.from_row(r) for r in self._all(sql, [*params, limit, offset])]

    def events_since(
        self,
        seq: int,
        *,
        limit: int = 1000,
        program_id: str | None = None,
        tenant: str | None = None,
        before: int | None = None,
    ) -> list[StoredEvent]:
        """Events with ``seq`` greater than ``seq`` (and less than ``before``), in order (SSE
        catch-up from a ``Last-Event-ID``). A scan: ``events`` has no index by design."""
        where: list[str] = ["seq > ?"]
        params: list[object] = [seq]
        if before is not None:
            where.append("seq < ?")
            params.append(before)
        for column, value in (("program_id", program_id), ("tenant", tenant)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {_EVENT_COLS} FROM {EVENTS} WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?"
        return [_event(r) for r in self._all(sql, [*params, limit])]

    def call_ends_since(self, since: float) -> list[Event]:
        """The calls' end events (finished, aborted, failed) logged after wall time ``since``,
        in order: what a restart charges its tenants' last minute with again. The log is
        written in time order, so the scan reads the last row groups only (DuckDB's zone
        maps on ``ts``)."""
        kinds = [k.value for k in _CALL_ENDS]
        sql = f"SELECT {_EVENT_COLS} FROM {EVENTS} WHERE ts > ? AND kind IN (?, ?, ?) ORDER BY seq"
        return [_event(r).event for r in self._all(sql, [since, *kinds])]

    def stored_bytes_by_tenant(self) -> dict[str, int]:
        """What the store keeps per tenant, as ``live.tenants.event_bytes`` counts it: per
        event a fixed 48 bytes, its ids and its data as JSON text; plus its tool results (a
        scan, at start-up)."""
        events = self._all(
            "SELECT tenant, sum(48 + strlen(coalesce(program_id, '')) + strlen(coalesce(node_id,"
            " '')) + strlen(tenant) + strlen(CAST(data AS VARCHAR)))"
            f" FROM {EVENTS}"
            " WHERE tenant IS NOT NULL GROUP BY tenant"
        )
        results = self._all(
            "SELECT p.tenant, sum(strlen(CAST(r.result AS VARCHAR)))"
            " FROM tool_results r JOIN tool_intents i USING (tool_call_id)"
            " JOIN programs p ON p.program_id = i.program_id GROUP BY p.tenant"
        )
        out: dict[str, int] = {}
        for tenant, nbytes in [*events, *results]:
            out[str(tenant)] = out.get(str(tenant), 0) + int(nbytes or 0)
        return out

    def last_seq(self) -> int:
        """The highest committed event ``seq`` (0 when empty)."""
        return int(self._all(f"SELECT coalesce(max(seq), 0) FROM {EVENTS}")[0][0])

    def sync_mark(self, name: str) -> int:
        """The ``seq`` the projection ``name`` reflects (``syncmarks.py``); 0 if none."""
        rows = self._all("SELECT seq FROM sync_marks WHERE name = ?", [name])
        return int(rows[0][0]) if rows else 0

    def program_events_after(self, seq: int, program_id: str | None = None) -> list[StoredEvent]:
        """Every event after ``seq`` that names a program (``program_id``: that one), in
        order: the tail a restart replays onto the projected rows (a second's worth, so read
        whole)."""
        if program_id is not None:
            rows = self._all(
                f"SELECT {_EVENT_COLS} FROM {EVENTS} WHERE seq > ? AND program_id = ? ORDER BY seq",
                [seq, program_id],
            )
        else:
            rows = self._all(
                f"SELECT {_EVENT_COLS} FROM {EVENTS} WHERE seq > ? AND program_id IS NOT NULL"
                " AND program_id <> '' ORDER BY seq",
                [seq],
            )
        return [_event(r) for r in rows]

    def restart_events(
        self,
        groups: Sequence[tuple[EventKind, Sequence[str]]],
        per_group: int,
        *,
        door_waits_of: Sequence[str] = (),
        door_since: float = 0.0,
    ) -> RestartEvents:
        """What a start-up reads back from the event log, in a single scan of it (a scan by
        one kind measured 0.3-0.4 s over 20 million events; the start-up made one such scan
        per kind before, and one more for the door waits):

        - ``latest``: the latest ``per_group`` events of each kind in ``groups`` per tenant
          and values of that kind's data fields, oldest first: what a restart learns again
          (``scheduler/learned.py``);
        - ``door_waits``: every wait at the door that programs ``door_waits_of`` ended at or
          after ``door_since`` (their earliest creation: none can come before), in log order;
          a ``program.door_waited`` of no length is left out (``server/live/doorwaits.py``).

        Raises ``ValueError`` if a kind comes twice in ``groups``, or if ``program.door_waited``
        is one of them (its events are read whole, for the door waits)."""
        kinds = [kind for kind, _ in groups]
        if len(set(kinds)) != len(kinds):
            raise ValueError("each kind once: its events are grouped by one set of fields")
        if _DOOR_WAITED in kinds:
            raise ValueError(f"{_DOOR_WAITED.value} is read whole, for the door waits")
        if not groups and not door_waits_of:
            return RestartEvents([], [])
        sql, params = _restart_scan(groups, per_group, door_waits_of, door_since)
        stored = [_event(r).event for r in self._all(sql, params)]
        latest = [event for event in stored if event.kind is not _DOOR_WAITED]
        door_waits = [
            DoorWait(event.program_id, event.t, waited)
            for event in stored
            if event.kind is _DOOR_WAITED and (waited := number(event.data, "door_s")) > 0.0
        ]
        return RestartEvents(latest, door_waits)

    def audit_log(
        self,
        *,
        limit: int = 100,
        before_id: int | None = None,
        actor: str | None = None,
        target: str | None = None,
    ) -> list[StoredAction]:
        """Operator actions, newest first; page with ``before_id``."""
        where: list[str] = ["TRUE"]
        params: list[object] = []
        for clause, value in (
            ("action_id < ?", before_id),
            ("actor = ?", actor),
            ("target = ?", target),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        names = _cols(OperatorAction.SPEC.names)
        sql = (
            f"SELECT {names} FROM operator_actions WHERE {' AND '.join(where)}"
            " ORDER BY action_id DESC LIMIT ?"
        )
        return [
            StoredAction(int(r[0]), OperatorAction.from_row(r[1:]))
            for r in self._all(sql, [*params, limit])
        ]

    def succeeded_actions(self, *actions: str) -> list[OperatorAction]:
        """Every operator action named in ``actions`` that succeeded (``result`` ``ok``),
        oldest first across all of them: what a restart replays to restore the state such
        actions set (one scan, in the order they were taken, so a later action of one kind
        reads after an earlier one of another)."""
        if not actions:
            return []
        names = _cols(OperatorAction.SPEC.names)
        marks = ", ".join("?" for _ in actions)
        sql = (
            f"SELECT {names} FROM operator_actions WHERE action IN ({marks}) AND result = 'ok'"
            " ORDER BY action_id"
        )
        return [OperatorAction.from_row(r[1:]) for r in self._all(sql, list(actions))]

    def get_intent(self, tool_call_id: str) -> IntentRecord | None:
        """One tool intent, or ``None``."""
        rows = self._all(
            f"SELECT {_INTENT_COLS} FROM tool_intents WHERE tool_call_id = ?", [tool_call_id]
        )
        return IntentRecord.from_row(rows[0]) if rows else None

    def list_intents(
        self, *, state: IntentState | None = None, program_id: str | None = None, limit: int = 100
    ) -> list[IntentRecord]:
        """Tool intents, most recently changed first (``needs_reconcile`` for the console)."""
        where: list[str] = ["TRUE"]
        params: list[object] = []
        for column, value in (("state", state), ("program_id", program_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(str(value))
        sql = (
            f"SELECT {_INTENT_COLS} FROM tool_intents WHERE {' AND '.join(where)}"
            " ORDER BY updated_at DESC, tool_call_id LIMIT ?"
        )
        return [IntentRecord.from_row(r) for r in self._all(sql, [*params, limit])]

    def tools(self, tenant: str) -> list[ToolRecord]:
        """Tools visible to ``tenant``: its own and the platform-wide ones (``tenant=''``);
        a tenant's tool shadows a platform tool of the same name."""
        sql = (
            f"SELECT {_cols(ToolRecord.SPEC.names)} FROM tools WHERE tenant IN (?, '')"
            " QUALIFY row_number() OVER (PARTITION BY name ORDER BY tenant DESC) = 1"
            " ORDER BY name"
        )
        return [ToolRecord.from_row(r) for r in self._all(sql, [tenant])]

    def tenants(self) -> list[TenantRecord]:
        """Every tenant, by id."""
        sql = f"SELECT {_cols(TenantRecord.SPEC.names)} FROM tenants ORDER BY tenant"
        return [TenantRecord.from_row(r) for r in self._all(sql)]

    def api_key(self, key_hash: str) -> ApiKeyRecord | None:
        """The unrevoked key with this hash, or ``None``."""
        sql = (
            f"SELECT {_cols(ApiKeyRecord.SPEC.names)} FROM api_keys"
            " WHERE key_hash = ? AND revoked_at IS NULL"
        )
        rows = self._all(sql, [key_hash])
        return ApiKeyRecord.from_row(rows[0]) if rows else None

    def metrics_since(
        self, ts: float, *, name: str | None = None, limit: int = 10_000
    ) -> list[MetricSample]:
        """Metric samples taken after ``ts``, oldest first."""
        where: list[str] = ["ts > ?"]
        params: list[object] = [ts]
        if name is not None:
            where.append("name = ?")
            params.append(name)
        sql = (
            f"SELECT {_cols(MetricSample.SPEC.names)} FROM metric_snapshots"
            f" WHERE {' AND '.join(where)} ORDER BY ts LIMIT ?"
        )
        return [MetricSample.from_row(r) for r in self._all(sql, [*params, limit])]
