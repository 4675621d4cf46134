"""One migration step: its statements in one transaction, committed, then a crash point.

Every schema change runs through :func:`commit_step`, in the main file (``schema.migrate``)
and across files (``event_log.prepare_move``), so a kill -9 test can stop after any of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.sqlconn import SqlConnection

#: A statement, or a statement with its parameters.
Statement = str | tuple[str, Sequence[object]]


def commit_step(
    con: SqlConnection, crash: CrashPoints | None, statements: Sequence[Statement]
) -> None:
    """Run ``statements`` in one transaction and commit; on any error roll back and re-raise.
    After the commit, pass the ``after_migration_commit`` crash point."""
    con.execute("BEGIN TRANSACTION")
    try:
        for statement in statements:
            if isinstance(statement, str):
                con.execute(statement)
            else:
                con.execute(statement[0], list(statement[1]))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    if crash is not None:
        crash.hit("after_migration_commit")
