"""``agentconsole export DIR``: every store table as Parquet, from a stopped server's file;
``agentconsole trace export``: the recorded programs as a trace ``bench --trace`` replays.

While ``serve`` runs it holds the database file exclusively, so export then fails with a
message saying so (stop the server first). The file is opened read-only and never changed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from agentconsole.server.store import StoreOpenError, export_parquet


def run_export(db: Path, out_dir: Path) -> list[Path]:
    """Write ``out_dir/<table>.parquet`` for each table of ``db``; returns the files."""
    try:
        return export_parquet(db, out_dir)
    except StoreOpenError as error:
        raise click.ClickException(str(error)) from error


def parse_when(text: str | None) -> float | None:
    """``--since``/``--until``: unix seconds, or an ISO 8601 time (UTC unless it says)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError as error:
        raise click.BadParameter(f"{text!r} is neither unix seconds nor ISO 8601") from error
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def run_trace_export(
    db: Path, out: Path, since: str | None, until: str | None, tenant: str | None
) -> int:
    """Write the trace of ``db``'s programs in the window to ``out``; returns how many."""
    from agentconsole.server.whatif import export_trace

    try:
        programs = export_trace(
            db, out, since=parse_when(since), until=parse_when(until), tenant=tenant
        )
    except StoreOpenError as error:
        raise click.ClickException(str(error)) from error
    return len(programs)
