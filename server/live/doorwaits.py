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

from collections.abc import Iterable, Sequence

from agentconsole.scheduler.program import Program
from agentconsole.server.store.repository import DoorWait

#: a program's waits at the door, (from, to)
Spans = list[tuple[float, float]]


def door_waits_since(programs: Sequence[Program]) -> float:
    """The earliest time a wait of ``programs`` can have ended at: their earliest creation
    (0.0 without programs)."""
    return min((p.created_at for p in programs), default=0.0)


def door_spans(waits: Iterable[DoorWait]) -> dict[str, Spans]:
    """Per program, its stored waits at the door as spans, in the order of ``waits`` (the
    log's, oldest first); a program that never waited there is left out. Read in the
    start-up's one scan of the log (``Repository.restart_events``)."""
    out: dict[str, Spans] = {}
    for wait in waits:
        out.setdefault(wait.program_id, []).append((wait.ended_at - wait.waited_s, wait.ended_at))
    return out
