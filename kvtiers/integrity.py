"""The prefix index's invariant check: one O(nodes) walk, for tests and debug runs.

Owns nothing but :func:`check_integrity`, which reads (never changes) a
:class:`~agentconsole.kvtiers.tree.TierTree` and raises ``AssertionError`` naming the first
broken invariant. It uses explicit raises, not ``assert``, so it also works under ``python -O``.
"""

from __future__ import annotations

from agentconsole.kvtiers.node import Node, PrivateKey
from agentconsole.kvtiers.tiers import ALL_TIERS
from agentconsole.kvtiers.tree import TierTree


def _ensure(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _check_namespace(node: Node, parent: Node) -> None:
    if node.tenant is None:
        _ensure(parent.tenant is None, f"public {node!r} under private parent")
        _ensure(node.slot == node.key, f"public {node!r} stored under {node.slot!r}")
    elif parent.tenant is None:
        want = PrivateKey(node.tenant, node.key)
        _ensure(node.slot == want, f"first private {node!r} stored under {node.slot!r}")
    else:
        _ensure(parent.tenant == node.tenant, f"{node!r} under another tenant's node")
        _ensure(node.slot == node.key, f"private {node!r} stored under {node.slot!r}")


def check_integrity(tree: TierTree) -> None:
    """Raise ``AssertionError`` unless every invariant of ``tree`` holds. Changes nothing.

    Checks: tree links and namespacing; tiers never faster than the parent's; lock counts never
    above the parent's; per-node child-tier counts; per-tier token, node and locked-token totals;
    used <= capacity; every eviction candidate has a live heap entry with its current priority.
    """
    root = tree._root
    _ensure(root.lock_count == 1, "root lock count changed")
    live = [{stamp: prio for prio, stamp, n in heap if n.stamp == stamp} for heap in tree._heaps]
    tokens = [0, 0, 0]
    locked = [0, 0, 0]
    count = [0, 0, 0]
    stack = [root]
    while stack:
        parent = stack.pop()
        child_tiers = [0, 0, 0]
        for slot, node in parent.children.items():
            stack.append(node)
            child_tiers[node.tier] += 1
            _ensure(node.parent is parent and node.slot == slot, f"bad link at {node!r}")
            _ensure(not node.dead and node.tokens > 0, f"dead or empty {node!r} in the tree")
            _ensure(node.queued_holds >= 0, f"{node!r} released more holds than it had")
            _ensure(node.tier >= parent.tier, f"{node!r} on a faster tier than its parent")
            _check_namespace(node, parent)
            if parent is not root:
                _ensure(parent.lock_count >= node.lock_count, f"{node!r} locked above parent")
            tokens[node.tier] += node.tokens
            count[node.tier] += 1
            if node.lock_count:
                locked[node.tier] += node.tokens
            if not node.lock_count and not node.child_tiers[node.tier]:
                prio = tree.strategy.priority(node)
                _ensure(node.stamp >= 0, f"candidate {node!r} has no heap entry")
                _ensure(
                    live[node.tier].get(node.stamp) == prio == node.heap_key,
                    f"candidate {node!r} heap entry has a stale priority",
                )
        _ensure(parent.child_tiers == child_tiers, f"child-tier counts wrong at {parent!r}")
    for tier in ALL_TIERS:
        name = tier.name
        _ensure(tree._node_tokens[tier] == tokens[tier], f"{name} token total drifted")
        _ensure(tree._node_count[tier] == count[tier], f"{name} node count drifted")
        _ensure(tree._locked_tokens[tier] == locked[tier], f"{name} locked tokens drifted")
        _ensure(tree.reserved(tier) >= 0, f"{name} reservations negative")
        _ensure(tree.used(tier) <= tree.capacity(tier), f"{name} over capacity")
