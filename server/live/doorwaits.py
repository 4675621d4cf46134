"""Door waits a restart carries over into the live metrics.

A program rebuilt from the store after a restart (``reopen.py``) is handed to the new
server's :class:`~agentconsole.scheduler.metrics.MetricsAggregator` by ``adopt``, its figures
taken from its rows. Its waits at the program door are in no row: the controller never counts
them, only the ``program.door_waited`` events the driver emits when each wait ends do, and
those went to the previous server's aggregator. They are read back here from the event log,
so the program's starvation, its tenant's max wait and its critical path's queue idle keep
them.

What cannot be carried over: a wait still running when the previous server stopped. The
driver records a wait only when it ends, and the door's entry time lives in memory, so that
wait left no trace in the store (its caller's request died with the server; a retry waits
again from its own arrival).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentconsole.scheduler.events import EventKind
from agentconsole.scheduler.program import Program
from agentconsole.server.store.event_log import EVENTS
from agentconsole.server.store.repository import CursorFactory

#: a program's waits at the door, (from, to)
Spans = list[tuple[float, float]]


def stored_door_waits(cursor: CursorFactory, programs: Sequence[Program]) -> dict[str, Spans]:
    """Per program of ``programs``, its waits at the door the event log recorded, oldest
    first (a program that never waited there is left out). One read of the log for them all,
    from the earliest one's creation on (its waits cannot come before; the log's zone maps
    on time skip what lies earlier)."""
    if not programs:
        return {}
    since = min(p.created_at for p in programs)
    sql = (
        f"SELECT program_id, ts, CAST(data->>'door_s' AS DOUBLE) FROM {EVENTS}"
        " WHERE kind = ? AND ts >= ? AND program_id IN (SELECT unnest(?::VARCHAR[]))"
        " ORDER BY seq"
    )
    params: list[object] = [
        EventKind.PROGRAM_DOOR_WAITED.value,
        since,
        [p.program_id for p in programs],
    ]
    with cursor() as cur:
        rows = cur.execute(sql, params).fetchall()
    out: dict[str, Spans] = {}
    for program_id, ended, waited in rows:
        if waited is not None and waited > 0.0:
            out.setdefault(str(program_id), []).append((ended - waited, float(ended)))
    return out
