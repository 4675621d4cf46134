"""Bulk writes of one batch: events and records go in as Arrow tables, one statement each.

Measured on the project's 2-core machine (DuckDB 2.0.1, file-backed, one transaction per
batch): Arrow ``INSERT ... SELECT`` beat the Python Appender by 20-30 % at 2,000-10,000 rows
and ``executemany`` by far; the fixed cost of a commit (fsync) is 2-4 ms, so throughput comes
from batch size.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from operator import attrgetter
from typing import Any

import pyarrow as pa

from agentconsole.scheduler.events import Event, Scalar
from agentconsole.server.store.event_log import EVENT_SPEC, EVENTS
from agentconsole.server.store.jsonutil import dumps
from agentconsole.server.store.records import Record
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.tablespec import SEQ, TableSpec, same

_EVENT_COLUMNS = ", ".join(EVENT_SPEC.names)
_EVENT_INSERT = f"INSERT INTO {EVENTS} ({_EVENT_COLUMNS}) SELECT {_EVENT_COLUMNS} FROM _ev"
_EMPTY_JSON = "{}"


def events_table(events: Sequence[Event], first_seq: int) -> pa.Table:
    """Arrow table of ``events`` numbered ``first_seq``, ``first_seq + 1``, ...

    Built a column at a time with ``map`` (C loops): this runs under the GIL on the writer's
    thread, so its cost is taken from the serving thread.
    """

    def column(name: str) -> list[Any]:
        return list(map(attrgetter(name), events))

    return pa.table(
        {
            "seq": pa.array(range(first_seq, first_seq + len(events)), SEQ.arrow),
            "ts": pa.array(column("t"), pa.float64()),
            "kind": pa.array(column("kind"), pa.string()),
            "program_id": pa.array(column("program_id"), pa.string()),
            "node_id": pa.array(column("node_id"), pa.string()),
            "attempt": pa.array(column("attempt"), pa.int32()),
            "tenant": pa.array(column("tenant"), pa.string()),
            "data": pa.array(list(map(_data_json, column("data"))), pa.string()),
        }
    )


def _data_json(data: Mapping[str, Scalar]) -> str:
    return dumps(data) if data else _EMPTY_JSON


@contextmanager
def _registered(con: SqlConnection, name: str, table: pa.Table) -> Iterator[None]:
    """``table`` readable as ``name`` for the block. After a failed statement the transaction
    is aborted and the unregister fails too ("transaction is aborted"): that error must not
    replace the statement's own, which the lane reads (a conflict is retried, a storage
    failure holds the batch, anything else is the batch's data)."""
    con.register(name, table)
    try:
        yield
    except BaseException:
        with suppress(Exception):
            con.unregister(name)
        raise
    con.unregister(name)


def insert_events(con: SqlConnection, events: Sequence[Event], first_seq: int) -> None:
    """Append ``events`` with consecutive ``seq`` from ``first_seq`` (inside the caller's txn)."""
    with _registered(con, "_ev", events_table(events, first_seq)):
        con.execute(_EVENT_INSERT)


def _records_table(spec: TableSpec, records: Sequence[Record]) -> pa.Table:
    """Arrow table of ``records``' columns (``spec.columns``), a column at a time."""
    arrays = {}
    for name, kind in spec.columns:
        values = list(map(attrgetter(name), records))
        if kind.encode is not same:
            values = list(map(kind.encode, values))
        arrays[name] = pa.array(values, kind.arrow)
    return pa.table(arrays)


def write_records(
    con: SqlConnection,
    spec: TableSpec,
    records: Sequence[Record],
    first_seq: int = 0,
) -> None:
    """Upsert (``spec.key``) or append ``records`` into ``spec.table`` in one statement each.

    Upserts keep the last record per key and replace the stored row (delete + insert: no
    index, so no index in the WAL). Appends with a ``seq_column`` are numbered from
    ``first_seq``. Runs inside the caller's transaction.
    """
    if spec.key:
        latest = {tuple(getattr(r, k) for k in spec.key): r for r in records}
        records = list(latest.values())
    table = _records_table(spec, records)
    if spec.seq_column:
        seqs = pa.array(range(first_seq, first_seq + len(records)), SEQ.arrow)
        table = table.add_column(0, spec.seq_column, seqs)
    names = ", ".join(spec.names)
    with _registered(con, "_rec", table):
        if spec.key:
            match = " AND ".join(f"t.{k} = u.{k}" for k in spec.key)
            con.execute(f"DELETE FROM {spec.table} t USING _rec u WHERE {match}")
        con.execute(f"INSERT INTO {spec.table} ({names}) SELECT {names} FROM _rec")
