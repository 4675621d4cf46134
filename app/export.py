"""``agentconsole export DIR``: every store table as Parquet, from a stopped server's file.

While ``serve`` runs it holds the database file exclusively, so export then fails with a
message saying so (stop the server first). The file is opened read-only and never changed.
"""

from __future__ import annotations

from pathlib import Path

import click

from agentconsole.server.store import StoreOpenError, export_parquet


def run_export(db: Path, out_dir: Path) -> list[Path]:
    """Write ``out_dir/<table>.parquet`` for each table of ``db``; returns the files."""
    try:
        return export_parquet(db, out_dir)
    except StoreOpenError as error:
        raise click.ClickException(str(error)) from error
