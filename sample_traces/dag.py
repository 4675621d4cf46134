"""Structure of a program's node DAG: resolving parent ids, rejecting bad graphs, ancestors.

Works on plain ids and parent lists so that it needs nothing from the dataclasses; the rule it
enforces is the format's: ids are unique, every parent is a listed node, and nodes are listed in
a topological order (each parent before its children), which also rules out cycles.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentconsole.sample_traces.errors import TraceError


def resolve_parents(
    ids: Sequence[str], parents: Sequence[Sequence[str]]
) -> tuple[tuple[int, ...], ...]:
    """Map each node's parent ids to list positions, validating the DAG.

    Requires ``len(ids) == len(parents)``. Raises :class:`TraceError` (field ``nodes[i].id`` or
    ``nodes[i].parents``) for a duplicate id, an unknown or repeated parent, a self-loop, a cycle
    (the message spells it out) or a parent listed after its child.
    """
    index: dict[str, int] = {}
    for i, node_id in enumerate(ids):
        if node_id in index:
            raise TraceError(f"duplicate node id {node_id!r}", field=f"nodes[{i}].id")
        index[node_id] = i
    resolved: list[tuple[int, ...]] = []
    for i, plist in enumerate(parents):
        field = f"nodes[{i}].parents"
        if len(set(plist)) != len(plist):
            raise TraceError("a parent is listed twice", field=field)
        row: list[int] = []
        for parent in plist:
            j = index.get(parent)
            if j is None:
                raise TraceError(f"unknown parent {parent!r}", field=field)
            row.append(j)
        resolved.append(tuple(row))
    for i, resolved_row in enumerate(resolved):
        for j in resolved_row:
            if j >= i:
                raise _ordering_error(ids, resolved, i, j)
    return tuple(resolved)


def _ordering_error(
    ids: Sequence[str], resolved: Sequence[tuple[int, ...]], i: int, j: int
) -> TraceError:
    field = f"nodes[{i}].parents"
    cycle = find_cycle(resolved)
    if cycle is not None:
        path = " -> ".join(repr(ids[k]) for k in cycle)
        return TraceError(f"cycle {path}", field=field)
    return TraceError(
        f"parent {ids[j]!r} is listed after node {ids[i]!r}; list nodes parents-first",
        field=field,
    )


def find_cycle(parents: Sequence[Sequence[int]]) -> list[int] | None:
    """One cycle of the parent graph as a closed path ``[a, ..., a]``, or ``None`` if acyclic."""
    state = [0] * len(parents)  # 0 new, 1 on the DFS stack, 2 done
    for start in range(len(parents)):
        if state[start]:
            continue
        stack: list[tuple[int, int]] = [(start, 0)]
        path: list[int] = [start]
        state[start] = 1
        while stack:
            node, k = stack[-1]
            if k == len(parents[node]):
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            stack[-1] = (node, k + 1)
            nxt = parents[node][k]
            if state[nxt] == 1:
                return [*path[path.index(nxt) :], nxt]
            if state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, 0))
                path.append(nxt)
    return None


def ancestors(parents: Sequence[Sequence[int]], i: int) -> list[int]:
    """Positions of all ancestors of node ``i``, ascending (a topological order)."""
    seen: set[int] = set()
    todo = list(parents[i])
    while todo:
        j = todo.pop()
        if j not in seen:
            seen.add(j)
            todo.extend(parents[j])
    return sorted(seen)
