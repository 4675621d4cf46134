"""DAG algorithms over a :class:`~agentconsole.scheduler.program.Program`.

A node may only name parents that already exist, so a program's node dict, in insertion order,
is always a topological order and the graph can never hold a cycle. Everything here relies on
that: longest paths are one forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from agentconsole.scheduler.program import Branch, Node, NodeState, Program

# members as globals: identity tests on hot paths (an enum class attribute is a slow lookup)
_PENDING, _DONE, _REPAIR = NodeState.PENDING, NodeState.DONE, Branch.REPAIR


class DagError(ValueError):
    """The requested change would break the DAG (unknown parent, duplicate id, ...)."""


class CriticalPath(NamedTuple):
    length: float
    nodes: tuple[str, ...]  # root to sink


def check_node(program: Program, node: Node) -> bool:
    """Whether ``node`` may join ``program``, and whether it would open a branch there (under
    a parent that already has a child, or on a repair branch). Raises :class:`DagError` if its
    id exists or a parent is unknown (which is also what keeps the graph acyclic). Changes
    nothing: a caller checks every rule before anything of the node is visible."""
    node_id, parents = node.node_id, node.parents
    nodes = program.nodes
    if node_id in nodes:
        raise DagError(f"node {node_id!r} already exists in program {program.program_id!r}")
    opens_branch = node.branch is _REPAIR
    if parents:  # a root (the usual first node) needs none of these checks
        for parent in parents:
            if parent not in nodes:
                raise DagError(f"node {node_id!r} names unknown parent {parent!r}")
        if len(parents) > 1 and len(set(parents)) != len(parents):
            raise DagError(f"node {node_id!r} lists a parent twice")
        if not opens_branch:
            children = program.children
            for parent in parents:
                if children.get(parent):
                    opens_branch = True
                    break
    return opens_branch


def add_node(program: Program, node: Node) -> None:
    """Insert ``node`` into ``program`` (:func:`check_node` first, raising as it does).

    Changes ``program.nodes``, ``program.children`` and ``program.branches`` (one more for a
    node that opens a branch).
    """
    insert_node(program, node, check_node(program, node))


def insert_node(program: Program, node: Node, opens_branch: bool) -> None:
    """Insert ``node``, which :func:`check_node` passed with ``opens_branch``."""
    node_id = node.node_id
    program.nodes[node_id] = node
    children = program.children
    if node_id not in children:
        children[node_id] = []
    for parent in node.parents:
        children[parent].append(node_id)
    if opens_branch:
        program.branches += 1


def edge_count(program: Program) -> int:
    """The parent links of ``program``'s DAG (one per parent of each node): what its nodes
    hold beyond themselves. Counted from ``children``, whose lists hold exactly those links
    (``add_node`` and the controller's undo keep them so); O(nodes) in C, about 0.1 ms at
    10,000 nodes."""
    return sum(map(len, program.children.values()))


def parents_done(program: Program, node: Node) -> bool:
    parents = node.parents
    if not parents:
        return True
    nodes = program.nodes
    if len(parents) == 1:
        return nodes[parents[0]].state is _DONE
    return all(nodes[p].state is _DONE for p in parents)


def unlocked_by(program: Program, node_id: str) -> list[Node]:
    """Known pending children that become ready once ``node_id`` is done (and it is done)."""
    out = []
    for child_id in program.children.get(node_id, ()):
        child = program.nodes[child_id]
        if child.state is _PENDING and parents_done(program, child):
            out.append(child)
    return out


def unlock_value(program: Program, node_id: str) -> int:
    """How many known pending children this node is the last unfinished parent of."""
    kids = program.children.get(node_id)
    if not kids:  # a node being queued usually has none yet
        return 0
    count = 0
    nodes = program.nodes
    for child_id in kids:
        child = nodes[child_id]
        if child.state is not _PENDING:
            continue
        others = (p for p in child.parents if p != node_id)
        if all(nodes[p].state is _DONE for p in others):
            count += 1
    return count


def descendants(program: Program, node_id: str) -> Iterator[Node]:
    """All nodes reachable from ``node_id`` (excluding it), each once, in topological order."""
    seen = {node_id}
    stack = [node_id]
    found: set[str] = set()
    while stack:
        for child in program.children.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                found.add(child)
                stack.append(child)
    return (n for nid, n in program.nodes.items() if nid in found)


def cancel_subtree(program: Program, node_id: str, now: float) -> list[Node]:
    """Cancel ``node_id`` and every non-terminal descendant.

    Returns the nodes whose state changed; those that were RUNNING need an abort in the
    runtime (LLM) or an interrupt (tool), which is the caller's job.
    """
    changed = []
    for node in (program.nodes[node_id], *descendants(program, node_id)):
        if not node.state.terminal:
            node.state = NodeState.CANCELLED
            node.finished_at = now
            changed.append(node)
    return changed


def critical_path(program: Program, weight: Callable[[Node], float]) -> CriticalPath:
    """The heaviest root-to-sink path, where a path weighs the sum of its nodes' ``weight``.

    Cancelled nodes weigh nothing and end no path. O(nodes + edges).
    """
    best: dict[str, float] = {}
    via: dict[str, str | None] = {}
    top, top_id = 0.0, ""
    for nid, node in program.nodes.items():
        if node.state is NodeState.CANCELLED:
            continue
        prev, prev_id = 0.0, None
        for p in node.parents:
            if p in best and best[p] > prev:
                prev, prev_id = best[p], p
        best[nid] = prev + weight(node)
        via[nid] = prev_id
        if best[nid] > top or not top_id:
            top, top_id = best[nid], nid
    if not top_id:
        return CriticalPath(0.0, ())
    path: list[str] = []
    cursor: str | None = top_id
    while cursor is not None:
        path.append(cursor)
        cursor = via[cursor]
    return CriticalPath(top, tuple(reversed(path)))


def observed_critical_path(program: Program) -> tuple[str, ...]:
    """The chain of nodes that determined when the program ended (or where it is now).

    The sink is the running node that started last, else the node that finished last; from
    there, repeatedly step to the parent that finished last: the classic "last arriving input"
    critical path used for critical-path idle.

    Nodes cancelled on request (``withdrawn``) are skipped: a dropped branch ended nothing,
    though its cancel (or a side effect's late end) may be the last ``finished_at`` there is.
    """
    kept = [n for n in program.nodes.values() if not n.withdrawn]
    running = [n for n in kept if n.state is NodeState.RUNNING]
    finished = [n for n in kept if n.finished_at is not None]
    if running:
        node = max(running, key=lambda n: n.started_at or 0.0)
    elif finished:
        node = max(finished, key=lambda n: n.finished_at or 0.0)
    else:
        return ()
    path = [node.node_id]
    while node.parents:
        parents = [program.nodes[p] for p in node.parents]
        # a parent withdrawn after its child ended did not hold the child back
        parents = [n for n in parents if not n.withdrawn] or parents
        node = max(parents, key=lambda n: n.finished_at or 0.0)
        path.append(node.node_id)
    return tuple(reversed(path))
