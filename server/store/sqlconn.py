"""What the store needs of a database connection: a DuckDB connection, or one that forwards.

``duckdb.DuckDBPyConnection`` satisfies it, and so does :class:`remote.RemoteConnection`
(DuckDB in a database process of its own); everything in the store that runs SQL takes this.
"""

from __future__ import annotations

from typing import Any, Protocol


class SqlConnection(Protocol):
    """A DuckDB cursor: one statement at a time, its rows read by the fetches."""

    def execute(self, query: str, parameters: object = None) -> SqlConnection:
        """Run ``query``; its result is what the fetches then return."""
        ...

    def fetchone(self) -> tuple[Any, ...] | None: ...

    def fetchall(self) -> list[tuple[Any, ...]]: ...

    def fetchmany(self, size: int = 1) -> list[tuple[Any, ...]]: ...

    def register(self, view_name: str, python_object: object) -> SqlConnection:
        """Make ``python_object`` (an Arrow table) queryable as ``view_name`` on this cursor."""
        ...

    def unregister(self, view_name: str) -> SqlConnection: ...

    def cursor(self) -> SqlConnection:
        """A new cursor of the same database, with its own transaction and snapshot."""
        ...

    def close(self) -> None: ...
