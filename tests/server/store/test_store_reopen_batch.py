"""A start-up reopens every running program in a fixed number of store reads (one per table),
and rebuilds each exactly as reading them one by one did."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.live.reopen import programs_to_restore, rebuild, rebuild_created
from agentconsole.server.store import AttemptRecord, NodeRecord, ProgramRecord, Store
from agentconsole.server.store.repository import ProgramView, Repository, StoredEvent
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.syncmarks import PROJECTOR, SyncMarkRecord


class _Counting:
    """A read cursor that counts the statements run through it (not BEGIN/COMMIT)."""

    def __init__(self, cur: SqlConnection, seen: list[str]) -> None:
        self._cur, self._seen = cur, seen

    def execute(self, sql: str, params: Any = None) -> SqlConnection:
        if sql not in ("BEGIN TRANSACTION", "COMMIT"):
            self._seen.append(sql)
        return self._cur.execute(sql, params or [])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def _counting_repo(store: Store) -> tuple[Repository, list[str]]:
    seen: list[str] = []

    @contextmanager
    def cursor() -> Iterator[Any]:
        with store.cursor() as cur:
            yield _Counting(cur, seen)

    return Repository(cursor), seen


def _fill(store: Store, programs: int) -> None:
    """``programs`` programs (every third finished), each with LLM and tool nodes out of
    creation order, retried attempts, and figures in their data; then an event tail past the
    projector's mark: a call that ended after the rows, a program created after them."""
    put = store.writer.put
    for i in range(programs):
        pid, t = f"p{i:04d}", float(1000 - i)  # ids and creation times in opposite orders
        state = "finished" if i % 3 == 2 else "running"
        data: dict[str, Any] = {"tokens_used": 10 * i, "attained_service_s": i / 8}
        put(ProgramRecord(pid, f"t{i % 2}", state, t, t, ("team=x",), data=data))
        for k in range(4):
            node = f"n{3 - k}"  # created last-named first: the read must order by time
            kind = "tool" if k == 2 else "llm"
            extra = {"tool": "grep"} if kind == "tool" else {"service_s": 0.5, "prompt_tokens": k}
            parents = (f"n{4 - k}",) if k else ()
            put(NodeRecord(pid, node, kind, "done", t + k, t + k, parents, 2, {**extra}))
            put(AttemptRecord(pid, node, 1, "failed", t + k + 0.1, t + k + 0.2))
            put(AttemptRecord(pid, node, 2, "done", t + k + 0.3, t + k + 0.4))
    store.writer.flush().result(30)
    store.writer.put_durable(SyncMarkRecord(PROJECTOR, store.repo.last_seq())).result(30)
    late = Event(2000.0, EventKind.PROGRAM_CREATED, "late", tenant="t0", data={})
    added = Event(2000.1, EventKind.NODE_ADDED, "late", "n1", data={"kind": "llm", "parents": ""})
    ended = Event(2000.2, EventKind.CALL_FINISHED, "p0000", "n3", 3, "t0", {"service_s": 0.25})
    for event in (late, added, ended):
        store.writer.append(event).result(30)


def _one_by_one(repo: Repository) -> list[tuple[ProgramView | None, list[StoredEvent]]]:
    """What ``programs_to_restore`` returned before it read in batches."""
    tails: dict[str, list[StoredEvent]] = {}
    for stored in repo.program_events_after(repo.sync_mark(PROJECTOR)):
        tails.setdefault(stored.event.program_id, []).append(stored)
    ids = [r.program_id for r in repo.list_programs(state="running", limit=1_000_000)]
    ids += [pid for pid in tails if pid not in set(ids)]
    return [(repo.get_program(pid), tails.get(pid, [])) for pid in ids]


@pytest.mark.parametrize("programs", [3, 300])
def test_start_up_reads_a_fixed_number_of_queries_and_rebuilds_the_same(
    store: Store, programs: int
) -> None:
    _fill(store, programs)
    repo, seen = _counting_repo(store)
    restored = programs_to_restore(repo)
    assert len(seen) == 6  # mark, tail, running ids; programs, nodes, attempts
    before = _one_by_one(store.repo)
    assert restored == before
    running = programs - programs // 3
    assert len(restored) == running + 1  # the running ones, then the one created late
    assert restored[-1][0] is None
    for (view, tail), (old_view, old_tail) in zip(restored, before, strict=True):
        rebuilt = rebuild(view, 9.0, tail) if view else rebuild_created(tail, 9.0)
        again = rebuild(old_view, 9.0, old_tail) if old_view else rebuild_created(old_tail, 9.0)
        assert rebuilt == again


def test_get_programs_is_get_program_for_each_held_id(store: Store) -> None:
    _fill(store, 5)
    ids = ["p0003", "missing", "p0000", "p0002"]
    views = store.repo.get_programs(ids)
    assert views == {pid: store.repo.get_program(pid) for pid in ids if pid != "missing"}
    assert [n.node_id for n in views["p0000"].nodes] == ["n3", "n2", "n1", "n0"]
    assert store.repo.get_programs([]) == {}
