"""Mechanism under the prefix index: the tiered radix tree, its accounting and eviction.

Owns per-tier token accounting (resident nodes, reservations, locked tokens, node counts), the
lazy per-tier eviction heaps, and the primitive tree edits every public operation is built from:
re-prioritising a node, moving a node to another tier, dropping a subtree, and evicting
candidates of a tier. The public operations (match, insert, lock, move, ...) live in
:mod:`agentconsole.kvtiers.prefix_index`.

Eviction heaps: a node is a *candidate* on its tier when it is unlocked and no child lives on
the same tier (a leaf relative to that tier). Each tier keeps a min-heap of
``(priority, stamp, node)``; an entry is live only while ``stamp == node.stamp``. Every event
that can make a node a candidate or change its priority calls :meth:`TierTree._refresh`, which
pushes a fresh entry; stale entries are skipped when popped and compacted away when a heap
grows past twice its tier's node count. Candidates therefore always have exactly one live entry
with their current priority, and eviction costs O(log n) per evicted node.
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heapify, heappop, heappush

from agentconsole.kvtiers.eviction import EvictionStrategy, get_strategy
from agentconsole.kvtiers.node import Node
from agentconsole.kvtiers.results import Counters, EvictionResult, KVMove
from agentconsole.kvtiers.tiers import ALL_TIERS, Tier, TierModel

_NEG_INF = -float("inf")


class TierTree:
    """The tree, its accounting and its eviction mechanism (see the module docstring).

    ``strategy`` orders eviction (a registered name or an instance); with ``demote`` (a HiCache
    host tier), a node evicted from a tier moves to the next slower existing tier when room can
    be made there for it, else it is dropped with its subtree. The tree only places; what the
    move costs is the write policy's (``tiers.py``: copied at eviction under write-back, copied
    at insertion under write-through), charged by its caller.
    """

    def __init__(
        self,
        model: TierModel,
        strategy: EvictionStrategy | str = "lru",
        *,
        demote: bool = True,
    ) -> None:
        self.model = model
        self.strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy
        self._priority = self.strategy.priority
        self.counters = Counters()
        self._capacity = [model.capacity(t) for t in ALL_TIERS]
        self._node_tokens = [0, 0, 0]
        self._reserved = [0, 0, 0]
        self._locked_tokens = [0, 0, 0]
        self._node_count = [0, 0, 0]
        #: nodes some queued call holds (``PrefixIndex.hold``); dead ones leave lazily
        self._held: set[Node] = set()
        self._heaps: list[list[tuple[float, int, Node]]] = [[], [], []]
        self._seq = 0
        self._demote_to = [model.next_slower(t) if demote else None for t in ALL_TIERS]
        self._root = Node(None, None, 0, Tier.HBM, None, None, None, _NEG_INF)
        self._root.lock_count = 1  # the root is never a candidate

    def capacity(self, tier: Tier) -> int:
        """Capacity of ``tier`` in tokens."""
        return self._capacity[tier]

    def used(self, tier: Tier) -> int:
        """Tokens in use on ``tier``: resident nodes plus reservations."""
        return self._node_tokens[tier] + self._reserved[tier]

    def free(self, tier: Tier) -> int:
        """Tokens that can be allocated on ``tier`` without evicting."""
        return self._capacity[tier] - self._node_tokens[tier] - self._reserved[tier]

    def cached(self, tier: Tier) -> int:
        """Tokens of resident nodes on ``tier`` (excludes reservations)."""
        return self._node_tokens[tier]

    def reserved(self, tier: Tier) -> int:
        """Tokens reserved on ``tier`` for KV outside the tree."""
        return self._reserved[tier]

    def evictable(self, tier: Tier) -> int:
        """Tokens on ``tier`` that eviction could free (resident and unlocked)."""
        return self._node_tokens[tier] - self._locked_tokens[tier]

    def node_count(self, tier: Tier) -> int:
        """Number of nodes on ``tier``."""
        return self._node_count[tier]

    def __len__(self) -> int:
        return sum(self._node_count)

    def reserve(self, tier: Tier, tokens: int) -> bool:
        """Reserve ``tokens`` on ``tier`` for KV not in the tree (a running call's growing KV).

        Changes only the reservation. Returns False and changes nothing if the tier lacks free
        room: call :meth:`make_room` first. ``tokens`` must be >= 0.
        """
        if tokens < 0:
            raise ValueError(f"reserve: tokens must be >= 0, got {tokens}")
        if tokens > self.free(tier):
            return False
        self._reserved[tier] += tokens
        return True

    def release(self, tier: Tier, tokens: int) -> None:
        """Return ``tokens`` of an earlier reservation on ``tier``; ``ValueError`` if too many."""
        if tokens < 0 or tokens > self._reserved[tier]:
            raise ValueError(f"release {tokens} on {tier.name}: {self._reserved[tier]} reserved")
        self._reserved[tier] -= tokens

    @property
    def root(self) -> Node:
        """The sentinel root (no block, never evicted)."""
        return self._root

    def nodes(self) -> Iterator[Node]:
        """Every resident node, parents before children."""
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    # ------------------------------------------------------------------ eviction API
    def make_room(
        self,
        tier: Tier,
        tokens: int,
        now: float,
        *,
        max_priority: float | None = None,
        all_or_nothing: bool = False,
    ) -> EvictionResult:
        """Evict from ``tier`` until ``free(tier) >= tokens``; evict nothing if already so.

        Changes: demotes or drops unlocked leaves of ``tier`` (smallest priority first), and
        possibly, to fit demoted nodes, lower-priority leaves of slower tiers. With
        ``max_priority`` only candidates whose priority is at most that are evicted (e.g.
        ``now`` under the ``retention`` strategy spares softly retained KV). ``ok`` is False
        when locked or spared nodes and reservations leave too little; what was evicted
        before that stays evicted, unless ``all_or_nothing``: then nothing is evicted when
        the room cannot be made (an admission that is turned away destroys no one's KV).
        Capacity is never exceeded.
        """
        result = EvictionResult(tier, tokens, now)
        short = tokens - self.free(tier)
        if short <= 0:
            return result
        if not all_or_nothing:
            result.freed = self._evict(tier, short, max_priority, result)
        elif self.evictable(tier) >= short:  # else no eviction can make the room
            if max_priority is None:
                # locks hold whole root paths, so every unlocked node of the tier can be
                # evicted, leaves first: the room can be made, and eviction makes it
                result.freed = self._evict(tier, short, None, result)
            else:
                plan = self._plan(tier, short, max_priority)
                if plan is not None:
                    result.freed = self._take(tier, plan, result)
        result.ok = self.free(tier) >= tokens
        return result

    def evict(self, tier: Tier, tokens: int, now: float) -> EvictionResult:
        """Free at least ``tokens`` more on ``tier`` regardless of free space (SGLang's evict).

        Changes as :meth:`make_room`; ``ok`` is False if fewer than ``tokens`` were freed.
        """
        result = EvictionResult(tier, tokens, now)
        result.freed = self._evict(tier, tokens, None, result)
        result.ok = result.freed >= tokens
        return result

    # ------------------------------------------------------------------ primitives
    def _refresh(self, node: Node) -> None:
        """(Re)push ``node`` on its tier's heap if it is a candidate with a changed priority."""
        if node.lock_count or node.child_tiers[node.tier]:
            return
        prio = self._priority(node)
        if node.stamp >= 0 and node.heap_key == prio:
            return
        self._seq += 1
        node.stamp = self._seq
        node.heap_key = prio
        heap = self._heaps[node.tier]
        heappush(heap, (prio, self._seq, node))
        if len(heap) > 2 * self._node_count[node.tier] + 64:
            # in place: a caller may hold this list while evicting
            heap[:] = [e for e in heap if e[2].stamp == e[1]]
            heapify(heap)

    def _pin(self, node: Node) -> None:
        """Lock ``node`` and its ancestors for the duration of an eviction that must spare them."""
        locked = self._locked_tokens
        n: Node | None = node
        while n is not None and n is not self._root:
            if not n.lock_count:
                locked[n.tier] += n.tokens
            n.lock_count += 1
            n = n.parent

    def _unpin(self, node: Node) -> None:
        """Undo :meth:`_pin` of ``node``."""
        locked = self._locked_tokens
        n: Node | None = node
        while n is not None and n is not self._root:
            n.lock_count -= 1
            if not n.lock_count:
                locked[n.tier] -= n.tokens
                self._refresh(n)
            n = n.parent

    def _set_tier(self, node: Node, new: Tier) -> None:
        """Move ``node``'s KV to ``new`` (accounting, parent counts, heap entries)."""
        old = node.tier
        tokens = node.tokens
        self._node_tokens[old] -= tokens
        self._node_tokens[new] += tokens
        self._node_count[old] -= 1
        self._node_count[new] += 1
        if node.lock_count:
            self._locked_tokens[old] -= tokens
            self._locked_tokens[new] += tokens
        parent = node.parent
        assert parent is not None
        parent.child_tiers[old] -= 1
        parent.child_tiers[new] += 1
        node.tier = new
        node.stamp = -1
        self._refresh(node)
        if parent.tier == old:
            self._refresh(parent)

    def _evict(self, tier: Tier, need: int, threshold: float | None, out: EvictionResult) -> int:
        """Evict candidates of ``tier`` (priority <= ``threshold``) until ``need`` freed."""
        freed = 0
        heap = self._heaps[tier]
        while freed < need and heap:
            prio, stamp, node = heap[0]
            if node.stamp != stamp:
                heappop(heap)
                continue
            if node.lock_count or node.child_tiers[tier]:
                heappop(heap)
                node.stamp = -1
                continue
            if threshold is not None and prio > threshold:
                break
            heappop(heap)
            node.stamp = -1
            freed += node.tokens
            self.counters.evicted_tokens[tier] += node.tokens
            self._evict_node(node, prio, out)
        return freed

    def _plan(self, tier: Tier, need: int, threshold: float) -> list[tuple[float, Node]] | None:
        """The candidates of ``tier`` (priority <= ``threshold``), smallest priority first,
        whose eviction frees ``need`` tokens, or None when they cannot free it.

        A dry run of :meth:`_evict`: a parent joins the candidates once the plan takes its
        last child on the tier. Changes nothing but dropping the heap entries :meth:`_evict`
        would drop as no candidate's; the entries of planned nodes are popped (on success
        :meth:`_take` evicts them) or pushed back (on failure)."""
        heap = self._heaps[tier]
        taken: list[tuple[float, int, Node]] = []  # live entries popped for the plan
        later: list[tuple[float, int, Node]] = []  # parents the plan makes candidates
        left: dict[int, int] = {}  # id(parent) -> its children on the tier not yet planned
        plan: list[tuple[float, Node]] = []
        seq = self._seq  # later entries rank after equal priorities, as a fresh push would
        freed = 0
        while freed < need:
            if heap and (not later or heap[0] < later[0]):
                entry = heap[0]
                prio, stamp, node = entry
                if node.stamp != stamp:
                    heappop(heap)
                    continue
                if node.lock_count or node.child_tiers[tier]:
                    heappop(heap)  # no candidate now; one the plan makes is in ``later``
                    node.stamp = -1
                    continue
                if prio > threshold:
                    break
                heappop(heap)
                taken.append(entry)
            elif later:
                prio, _, node = later[0]
                if prio > threshold:
                    break
                heappop(later)
            else:
                break
            plan.append((prio, node))
            freed += node.tokens
            parent = node.parent
            if parent is not None and parent.tier == tier and not parent.lock_count:
                count = left.get(id(parent), parent.child_tiers[tier]) - 1
                left[id(parent)] = count
                if not count:
                    seq += 1
                    heappush(later, (self._priority(parent), seq, parent))
        if freed >= need:
            return plan
        for entry in taken:
            heappush(heap, entry)
        return None

    def _take(self, tier: Tier, plan: list[tuple[float, Node]], out: EvictionResult) -> int:
        """Evict the nodes of a :meth:`_plan` in its order; the tokens freed."""
        freed = 0
        for prio, node in plan:
            node.stamp = -1
            freed += node.tokens
            self.counters.evicted_tokens[tier] += node.tokens
            self._evict_node(node, prio, out)
        return freed

    def _evict_node(self, node: Node, prio: float, out: EvictionResult) -> None:
        """Demote ``node`` one tier if room can be made there for it, else drop its subtree."""
        src = node.tier
        dst = self._demote_to[src]
        if dst is not None:
            tokens = node.tokens
            short = tokens - self.free(dst)
            if short > 0:
                self._evict(dst, short, prio, out)
                short = tokens - self.free(dst)
            if short <= 0:
                self.counters.demoted_tokens[src] += tokens
                self._set_tier(node, dst)
                out.moves.append(KVMove(node, tokens, src, dst, True))
                return
        self._drop(node, out.moves, True)

    def _drop(self, node: Node, moves: list[KVMove], evicted: bool) -> None:
        """Remove ``node`` and its subtree (all unlocked) from the index."""
        parent = node.parent
        assert parent is not None
        del parent.children[node.slot]
        parent.child_tiers[node.tier] -= 1
        stack = [node]
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            tier = n.tier
            self._node_tokens[tier] -= n.tokens
            self._node_count[tier] -= 1
            self.counters.dropped_tokens[tier] += n.tokens
            moves.append(KVMove(n, n.tokens, tier, None, evicted))
            n.dead = True
            n.stamp = -1
            n.children = {}
        if parent.tier == node.tier:
            self._refresh(parent)
