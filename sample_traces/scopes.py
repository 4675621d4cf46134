"""Context scopes: which ancestors' segments enter a call's context once some calls compact.

An LLM node marked ``compact`` starts a fresh context (a compaction that continues from a
summary, or a subagent that starts from its task): its prompt replaces the history it would
inherit. Each such node opens a *scope*. Every node belongs to one scope: a compact node to its
own, a root to the program's (:data:`ROOT`), any other node to the innermost scope enclosing
all of its parents' scopes, where a compact node's scope is enclosed by the scope it was opened
from (the innermost one enclosing its parents'). So a chain after a compaction stays in the
compaction's scope, and a join of a subagent's last call with its parent's turn goes back to
the parent's scope.

A node's context takes, in listing order, every segment of its ancestors in its own scope, and
only the last segment (the output or result) of each ancestor outside it that feeds the node or
one of those in-scope ancestors: the summary a compaction continues from, the task a subagent
starts with, a subagent's report. Without compact nodes every node is in :data:`ROOT` and the
rule is the plain one (all ancestors, all segments). Positions only, like
:mod:`agentconsole.sample_traces.dag`.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentconsole.sample_traces.dag import ancestors

#: The program's own scope, the one its roots start in.
ROOT = -1


def node_scopes(parents: Sequence[Sequence[int]], compact: Sequence[bool]) -> tuple[int, ...]:
    """The scope of each node (the position of the compact node that opened it, or ROOT).

    ``parents`` are parent positions of a graph listed parents-first (see
    :func:`~agentconsole.sample_traces.dag.resolve_parents`).
    """
    scope: list[int] = []
    enclosing: dict[int, int] = {ROOT: ROOT}
    depth: dict[int, int] = {ROOT: 0}
    for i, plist in enumerate(parents):
        outer = _innermost_common([scope[p] for p in plist], enclosing, depth)
        if compact[i]:
            enclosing[i] = outer
            depth[i] = depth[outer] + 1
            scope.append(i)
        else:
            scope.append(outer)
    return tuple(scope)


def _innermost_common(
    scopes: Sequence[int], enclosing: dict[int, int], depth: dict[int, int]
) -> int:
    if not scopes:
        return ROOT
    a = scopes[0]
    for b in scopes[1:]:
        while a != b:
            if depth[a] >= depth[b]:
                a = enclosing[a]
            else:
                b = enclosing[b]
    return a


def context_members(
    parents: Sequence[Sequence[int]], scope: Sequence[int], i: int
) -> list[tuple[int, bool]]:
    """The ancestors of node ``i`` whose segments enter its context, ascending, each with
    ``True`` when all its segments do (it is in ``i``'s scope) or ``False`` when only its last
    one does (a result crossing into the scope)."""
    mine = scope[i]
    order = ancestors(parents, i)
    inside = [j for j in order if scope[j] == mine]
    crossing = {p for j in (*inside, i) for p in parents[j] if scope[p] != mine}
    kept = set(inside)
    return [(j, j in kept) for j in order if j in kept or j in crossing]
