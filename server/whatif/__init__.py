"""What-if replay: a store's recorded programs rebuilt as a trace ``bench`` can replay.

``export_trace(db, out, since=, until=, tenant=)`` reads a closed store file (read-only) and
writes the programs that arrived in the window as JSONL in the ``sample_traces`` format
(:mod:`recording` reads, :mod:`rebuild` maps, :mod:`prefixes` recovers shared prefixes from
the prompt block hashes). ``agentconsole trace export`` is its command.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentconsole.sample_traces import TraceProgram, dump_trace
from agentconsole.server.store.export import read_only, refuse_rows_behind
from agentconsole.server.whatif.rebuild import rebuild_trace
from agentconsole.server.whatif.recording import load_recording


def export_trace(
    db: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    since: float | None = None,
    until: float | None = None,
    tenant: str | None = None,
) -> list[TraceProgram]:
    """Write the trace of ``db``'s programs that arrived in ``[since, until)`` (unix seconds;
    of ``tenant`` only when given) to ``out``; return its programs. Arrivals count from
    ``since`` when given, else from the first program's. Raises ``StoreOpenError`` for a file
    a running server holds, or a missing or damaged one; writes nothing for a window with no
    program (an empty trace, which ``bench --trace`` refuses) and returns none."""
    with read_only(db) as con:
        refuse_rows_behind(con, Path(db).absolute())
        recorded = load_recording(con, since=since, until=until, tenant=tenant)
    programs = rebuild_trace(recorded, since)
    if programs:
        dump_trace(programs, Path(out))
    return programs


__all__ = ["export_trace", "rebuild_trace"]
