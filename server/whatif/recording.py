"""What a store recorded of its programs, read back for a what-if replay.

Read from a closed store file (:func:`~agentconsole.server.store.export.read_only`): programs
(arrival, end, state, deadline), their nodes (kind, parents, branch, tool, timing, token
counts), attempts (one row per try: a tool's latencies and outcomes), the tool gateway's
intents (whether a tool has side effects) and each call's prompt block hashes
(``prompt_blocks``; absent in stores written before it existed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentconsole.scheduler.eventdata import token_count
from agentconsole.server.store.jsonutil import loads_object
from agentconsole.server.store.prompt_blocks import HASH_LIST
from agentconsole.server.store.sqlconn import SqlConnection


@dataclass(frozen=True, slots=True)
class RecordedAttempt:
    started_at: float
    finished_at: float | None
    state: str  # ok | fail | timeout | aborted | running | ...


@dataclass(slots=True)
class RecordedNode:
    node_id: str
    kind: str  # llm | tool
    state: str
    parents: tuple[str, ...]
    created_at: float
    finished_at: float | None
    branch: str = "main"
    tool: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    #: the last call's ``max_tokens`` (None: not said, or a store written before it was kept)
    max_tokens: int | None = None
    attempts: list[RecordedAttempt] = field(default_factory=list)
    #: the last attempt's prompt block hashes (empty: redacted, unrecorded or too short)
    blocks: tuple[int, ...] = ()
    block_tokens: int = 0
    side_effect: bool = False
    idempotent: bool = True


@dataclass(slots=True)
class RecordedProgram:
    program_id: str
    tenant: str
    state: str
    created_at: float
    finished_at: float | None
    deadline: float | None
    labels: dict[str, str]
    nodes: list[RecordedNode] = field(default_factory=list)


def _tables(con: SqlConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
    ).fetchall()
    return {str(r[0]) for r in rows}


def _labels(values: Iterable[str]) -> dict[str, str]:
    pairs = (v.split(":", 1) for v in values)
    return {p[0]: p[1] if len(p) > 1 else "" for p in pairs}


def _window(since: float | None, until: float | None, tenant: str | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` of the programs wanted, and its parameters."""
    where, params = ["TRUE"], list[Any]()
    for clause, value in (("created_at >= ?", since), ("created_at < ?", until),
                          ("tenant = ?", tenant)):  # fmt: skip
        if value is not None:
            where.append(clause)
            params.append(value)
    return " AND ".join(where), params


def load_recording(
    con: SqlConnection,
    *,
    since: float | None = None,
    until: float | None = None,
    tenant: str | None = None,
) -> list[RecordedProgram]:
    """The programs that arrived in ``[since, until)`` (of ``tenant``), in arrival order,
    with their nodes in creation order. ``con`` may be read-only."""
    where, params = _window(since, until, tenant)
    rows = con.execute(
        "SELECT program_id, tenant, state, created_at, finished_at, deadline, labels"
        f" FROM programs WHERE {where} ORDER BY created_at, program_id",
        params,
    ).fetchall()
    programs = {
        str(r[0]): RecordedProgram(
            str(r[0]), str(r[1]), str(r[2]), float(r[3]), r[4], r[5], _labels(r[6] or ())
        )
        for r in rows
    }
    if not programs:
        return []
    wanted = _Wanted(con, f"program_id IN (SELECT program_id FROM programs WHERE {where})", params)
    nodes = _nodes(wanted, programs)
    _attempts(wanted, nodes)
    tables = _tables(con)
    if "tool_intents" in tables:
        _intents(wanted, nodes)
    if "prompt_blocks" in tables:
        _blocks(wanted, nodes)
    return list(programs.values())


@dataclass(frozen=True, slots=True)
class _Wanted:
    """Rows of the wanted programs: ``rows(sql)`` with ``{wanted}`` as the filter."""

    con: SqlConnection
    clause: str
    params: list[Any]

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql.format(wanted=self.clause), self.params).fetchall()


def _nodes(
    wanted: _Wanted, programs: dict[str, RecordedProgram]
) -> dict[tuple[str, str], RecordedNode]:
    rows = wanted.rows(
        "SELECT program_id, node_id, kind, state, parents, created_at, data FROM nodes"
        " WHERE {wanted} ORDER BY created_at, node_id"
    )
    found: dict[tuple[str, str], RecordedNode] = {}
    for pid, nid, kind, state, parents, created, data in rows:
        info = loads_object(data)
        node = RecordedNode(
            node_id=str(nid),
            kind=str(kind),
            state=str(state),
            parents=tuple(parents or ()),
            created_at=float(created),
            finished_at=info.get("finished_at"),  # type: ignore[arg-type]
            branch=str(info.get("branch") or "main"),
            tool=info.get("tool"),  # type: ignore[arg-type]
            prompt_tokens=int(info.get("prompt_tokens") or 0),  # type: ignore[arg-type]
            output_tokens=int(info.get("output_tokens") or 0),  # type: ignore[arg-type]
            max_tokens=token_count(info, "max_tokens"),
        )
        programs[str(pid)].nodes.append(node)
        found[(str(pid), node.node_id)] = node
    return found


def _attempts(wanted: _Wanted, nodes: dict[tuple[str, str], RecordedNode]) -> None:
    rows = wanted.rows(
        "SELECT program_id, node_id, state, started_at, finished_at FROM attempts"
        " WHERE {wanted} ORDER BY attempt"
    )
    for pid, nid, state, started, finished in rows:
        node = nodes.get((str(pid), str(nid)))
        if node is not None:
            node.attempts.append(RecordedAttempt(float(started), finished, str(state)))


def _intents(wanted: _Wanted, nodes: dict[tuple[str, str], RecordedNode]) -> None:
    rows = wanted.rows(
        "SELECT program_id, node_id, bool_or(side_effect), bool_and(idempotent) FROM tool_intents"
        " WHERE {wanted} GROUP BY program_id, node_id"
    )
    for pid, nid, side_effect, idempotent in rows:
        node = nodes.get((str(pid), str(nid)))
        if node is not None:
            node.side_effect, node.idempotent = bool(side_effect), bool(idempotent)


def _blocks(wanted: _Wanted, nodes: dict[tuple[str, str], RecordedNode]) -> None:
    rows = wanted.rows(
        "SELECT program_id, node_id, blocks, block_tokens FROM prompt_blocks"
        " WHERE {wanted} ORDER BY attempt, ts"
    )
    for pid, nid, blocks, block_tokens in rows:  # the last attempt's row wins
        node = nodes.get((str(pid), str(nid)))
        if node is not None:
            node.blocks = HASH_LIST.decode(blocks)
            node.block_tokens = int(block_tokens)
