"""The event log read back from the DuckDB file once serve has stopped: is it whole?

``seq`` is the store's one numbering of events (the hub starts each run at the highest
committed ``seq`` + 1), so a whole log is ``seq`` 1..N with no gap and no repeat, even across
kill -9: events a crash lost were never committed and their numbers are given again. Per
program, lifecycle events happen once: one ``program.created``, one ``node.added`` per node,
one ``call.queued`` and at most one end per call attempt.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from agentconsole.server.store.event_log import event_log_path

from .report import Report

#: kinds that happen at most once per key (program; program+node; program+node+attempt)
_ONCE_PER_PROGRAM = ("program.created",)
_ONCE_PER_NODE = ("node.added",)
_ONCE_PER_ATTEMPT = ("call.queued",)
_CALL_ENDS = ("call.finished", "call.failed", "call.aborted")


@dataclass(slots=True)
class EventLogAudit:
    """What the log holds and what is wrong with it."""

    events: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    programs: int = 0
    seq_gaps: int = 0
    seq_duplicates: int = 0
    duplicate_events: list[str] = field(default_factory=list)
    output_tokens: int = 0

    def check(self, report: Report) -> None:
        """Add the log's two criteria to ``report``."""
        report.check(
            "event log numbered: seq 1..N, no gap, no repeat",
            not (self.seq_gaps or self.seq_duplicates),
            f"{self.seq_gaps} gaps, {self.seq_duplicates} repeated",
        )
        report.check(
            "event log: no lifecycle event twice",
            not self.duplicate_events,
            f"{len(self.duplicate_events)} twice {self.duplicate_events[:3]}",
        )


def audit_event_log(db: Path) -> EventLogAudit:
    """Read the event log of the store at ``db`` (serve must have stopped) and audit it."""
    con = duckdb.connect(str(event_log_path(db)), read_only=True)
    try:
        rows = con.execute(
            "SELECT seq, kind, program_id, node_id, attempt, data FROM events ORDER BY seq"
        ).fetchall()
    finally:
        con.close()
    audit = EventLogAudit(events=len(rows))
    seqs = [int(r[0]) for r in rows]
    audit.seq_duplicates = len(seqs) - len(set(seqs))
    if seqs:
        audit.seq_gaps = (max(seqs) - min(seqs) + 1) - len(set(seqs)) + (min(seqs) - 1)
    keys: Counter[tuple[str, ...]] = Counter()
    for _, kind, program, node, attempt, data in rows:
        audit.kinds[kind] += 1
        if kind in _ONCE_PER_PROGRAM:
            keys[(kind, program)] += 1
        elif kind in _ONCE_PER_NODE:
            keys[(kind, program, node)] += 1
        elif kind in _ONCE_PER_ATTEMPT:
            keys[(kind, program, node, str(attempt))] += 1
        elif kind in _CALL_ENDS:
            keys[("call.end", program, node, str(attempt))] += 1
        if kind == "call.finished" and data:
            audit.output_tokens += int(json.loads(data).get("output_tokens", 0))
    audit.programs = audit.kinds["program.created"]
    audit.duplicate_events = ["/".join(k) for k, n in keys.items() if n > 1]
    return audit
