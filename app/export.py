"""``agentconsole export DIR``: every store table as Parquet, from a stopped server's file;
``agentconsole trace export``: the recorded programs as a trace ``bench --trace`` replays.

While ``serve`` runs it holds the database file exclusively, so export then fails with a
message saying so (stop the server first). The file is opened read-only and never changed.

:func:`check_output` and :func:`make_parent` serve every command that writes a file: the
store is imported only where it is read, so ``bench`` can use them without loading DuckDB.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import click


def run_export(db: Path, out_dir: Path) -> list[Path]:
    """Write ``out_dir/<table>.parquet`` for each table of ``db``; returns the files."""
    from agentconsole.server.store import StoreOpenError, export_parquet

    check_output(out_dir / "programs.parquet", "OUT_DIR")
    try:
        return export_parquet(db, out_dir)
    except StoreOpenError as error:
        raise click.ClickException(str(error)) from error
    except OSError as error:  # what the checks cannot see (a pseudo-filesystem, for root)
        raise click.ClickException(f"cannot write to {out_dir}: {error}") from error


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


def check_output(path: Path, option: str) -> None:
    """Refuse, as a usage error naming ``option``, an output file that could not be written,
    before the command does its work (a long run should not end in a write error). A missing
    folder is fine: :func:`make_parent` creates it when the file is written."""
    try:
        folder = path.parent
        while not folder.exists():  # the nearest folder that exists is where mkdir starts
            folder = folder.parent
        if not folder.is_dir():
            raise click.BadParameter(f"{folder} is not a folder", param_hint=option)
        existing = path.exists()
    except OSError as error:  # e.g. a folder on the way that may not be searched
        message = f"cannot reach {path}: {error.strerror}"
        raise click.BadParameter(message, param_hint=option) from None
    if existing and path.is_dir():
        raise click.BadParameter(f"{path} is a folder", param_hint=option)
    if existing and _is_duckdb(path):  # a store (``--out`` given the ``--db``): never written over
        raise click.BadParameter(f"{path} is a DuckDB database", param_hint=option)
    target, access = (path, os.W_OK) if existing else (folder, os.W_OK | os.X_OK)
    if not os.access(target, access):
        raise click.BadParameter(f"{target} is not writable", param_hint=option)


def _is_duckdb(path: Path) -> bool:
    """Whether ``path`` holds a DuckDB database (its header's magic bytes)."""
    try:
        with path.open("rb") as file:
            return file.read(12)[8:12] == b"DUCK"
    except OSError:
        return False


def make_parent(path: Path) -> None:
    """Create ``path``'s folder (and those above it) if missing, as ``calibrate --out`` does."""
    path.parent.mkdir(parents=True, exist_ok=True)


def run_trace_export(
    db: Path, out: Path, since: str | None, until: str | None, tenant: str | None
) -> int:
    """Write the trace of ``db``'s programs in the window to ``out``; returns how many."""
    from agentconsole.server.store import StoreOpenError
    from agentconsole.server.whatif import export_trace

    check_output(out, "--out")
    window = parse_when(since), parse_when(until)
    if window[0] is not None and window[1] is not None and window[0] >= window[1]:
        raise click.UsageError(f"--since ({since}) must come before --until ({until})")
    make_parent(out)
    try:
        programs = export_trace(db, out, since=window[0], until=window[1], tenant=tenant)
    except StoreOpenError as error:
        raise click.ClickException(str(error)) from error
    if not programs:  # it wrote an empty file and said "0 programs" (bench refuses it)
        raise click.ClickException(f"no program arrived in the window: {out} not written")
    return len(programs)
