"""Sync marks: how far a projection of the event log has reached, one row per projection.

The projector (``server/live/projector.py``) writes the ``programs``, ``nodes`` and
``attempts`` rows about once a second, while events commit every few milliseconds, so a crash
loses up to a second of rows but almost no events. After each batch of rows it writes its
mark: ``seq``, every event up to it is reflected in committed rows (queued behind the rows in
the same FIFO lane, so a committed mark implies committed rows). A restart rebuilds programs
from the rows, then replays the events past the mark (``server/live/eventtail.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.server.store.tablespec import SEQ, STR, TableRecord, TableSpec

#: The projector's mark (programs, nodes and attempts rows).
PROJECTOR = "projector"


@dataclass(frozen=True, slots=True)
class SyncMarkRecord(TableRecord):
    """The projection ``name`` reflects every event up to ``seq``."""

    name: str
    seq: int


SyncMarkRecord.SPEC = TableSpec("sync_marks", (("name", STR), ("seq", SEQ)), key=("name",))

#: The migration's statements (frozen history). An upgraded store's rows already reflect its
#: whole event log, so the mark starts at the log's last ``seq`` (0 for a new store).
MIGRATION_DDL = (
    "CREATE TABLE sync_marks (name VARCHAR NOT NULL, seq BIGINT NOT NULL)",
    f"INSERT INTO sync_marks SELECT '{PROJECTOR}', coalesce(max(seq), 0) FROM event_log.events",
)
