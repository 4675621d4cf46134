"""Tenant-scoped radix prefix index over tiered KV (SGLang radix cache + HiCache, in miniature).

Owns the public operations on the tiered tree of :mod:`agentconsole.kvtiers.tree`: lookup
(``match``/``peek``, counting *hit tokens*, not hit requests), ``insert``, ``lock``/``unlock``
for running calls, soft ``retain`` for tool waits, explicit ``move``/``drop``, and
``make_room``/``evict``.

Namespacing: a block is stored in the shared (public) namespace only while it and every block
before it are public; the first private block is keyed by ``PrivateKey(tenant, key)`` under its
public parent and everything below it is that tenant's. So tenant B can never match tenant A's
private blocks, even with identical keys.

Invariants (checked by :meth:`PrefixIndex.check_integrity`):

* per tier, used tokens = node tokens + reservations <= capacity;
* tiers never get faster going down the tree (a node on HBM has its parent on HBM; HBM and DRAM
  nodes are closed under parent), so the attention prefix of a device node is on device;
* a locked node is never evicted, demoted or dropped; ``lock`` takes root paths, so a node's
  lock count is at least each child's;
* a private node's children are private to the same tenant.

Per LLM call the simulator does: ``match`` -> ``lock(match.path)`` -> ``promote`` DRAM/DISK
hits to HBM leaving ``room=n`` for the call's own KV (all or nothing) -> ``reserve(HBM, n)`` ->
run -> ``release`` + ``insert`` the new context -> ``unlock(match.path)``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from agentconsole.kvtiers.integrity import check_integrity
from agentconsole.kvtiers.node import Block, Node, PrivateKey
from agentconsole.kvtiers.results import InsertResult, KVMove, Match, MoveResult
from agentconsole.kvtiers.tiers import ALL_TIERS, Tier
from agentconsole.kvtiers.tree import TierTree

_NEG_INF = -float("inf")


class PrefixIndex(TierTree):
    """Radix tree of resident KV blocks over the tiers of a :class:`TierModel`.

    Construct with ``PrefixIndex(model, strategy="lru" | "retention" | instance, demote=True)``.
    """

    def peek(self, tenant: str, blocks: Sequence[Block]) -> Match:
        """The longest resident prefix of ``blocks`` for ``tenant``. Changes nothing.

        ``ValueError`` if a resident block has the same key but a different token count.
        """
        children = self._root.children
        path: list[Node] = []
        by_tier = [0, 0, 0]
        requested = 0
        public = matching = True
        for block in blocks:
            tokens = block.tokens
            requested += tokens
            if not matching:
                continue  # the rest only counts as requested
            slot: Hashable = block.key
            if public and not block.public:
                public = False
                slot = PrivateKey(tenant, slot)
            child = children.get(slot)
            if child is None:
                matching = False
                continue
            if child.tokens != tokens:
                raise ValueError(f"block {block.key!r}: {tokens} tokens, index has {child}")
            path.append(child)
            by_tier[child.tier] += tokens
            children = child.children
        return Match(path, by_tier, requested)

    def match(self, tenant: str, blocks: Sequence[Block], now: float) -> Match:
        """Like :meth:`peek`, and touches the matched path and counts the lookup.

        Changes: ``last_access = now`` on every matched node (their eviction priority), and the
        ``matches``/``lookup_tokens``/``hit_tokens`` counters.
        """
        found = self.peek(tenant, blocks)
        for node in found.path:
            node.last_access = now
            if not node.lock_count and not node.child_tiers[node.tier]:
                self._refresh(node)
        c = self.counters
        c.matches += 1
        c.lookup_tokens += found.requested_tokens
        for tier in ALL_TIERS:
            c.hit_tokens[tier] += found.tokens_by_tier[tier]
        return found

    # ------------------------------------------------------------------ insert
    def insert(
        self,
        tenant: str,
        blocks: Sequence[Block],
        now: float,
        tier: Tier = Tier.HBM,
        owner: str | None = None,
    ) -> InsertResult:
        """Make ``blocks`` resident for ``tenant``, extending the path on ``tier``.

        Changes: touches (``last_access = now``) existing nodes; promotes existing nodes that
        live on a slower tier than ``tier`` to ``tier`` (the caller recomputed or reloaded
        them); creates nodes for missing blocks on ``tier`` with ``owner``. Existing nodes keep
        their owner and are not counted again. Never evicts: it stops at the first block that
        does not fit in ``free(tier)`` (``complete=False``), so call :meth:`make_room` (or
        release the call's reservation) first. ``ValueError`` on a token-count mismatch (blocks
        before it stay inserted).
        """
        node = self._root
        path: list[Node] = []
        free = self.free(tier)
        new = 0
        complete = True
        public = True
        for block in blocks:
            if public and not block.public:
                public = False
                slot: Hashable = PrivateKey(tenant, block.key)
            else:
                slot = block.key
            tokens = block.tokens
            child = node.children.get(slot)
            if child is None:
                if tokens > free:
                    complete = False
                    break
                child = Node(
                    block.key, slot, tokens, tier, node, None if public else tenant, owner, now
                )
                node.children[slot] = child
                node.child_tiers[tier] += 1
                self._node_tokens[tier] += tokens
                self._node_count[tier] += 1
                self.counters.inserted_tokens += tokens
                free -= tokens
                new += tokens
                self._refresh(child)
            else:
                if child.tokens != tokens:
                    raise ValueError(f"block {block.key!r}: {tokens} tokens, index has {child}")
                child.last_access = now
                if child.tier > tier and tokens <= free:
                    self.counters.promoted_tokens[tier] += tokens
                    self._set_tier(child, tier)
                    free -= tokens
                    new += tokens
                else:
                    if not child.lock_count and not child.child_tiers[child.tier]:
                        self._refresh(child)
                    if child.tier > tier:  # cannot be promoted: no room
                        complete = False
                        break
            path.append(child)
            node = child
        return InsertResult(new, path, complete)

    # ------------------------------------------------------------------ locks and retention
    def lock(self, path: Sequence[Node]) -> None:
        """Mark ``path`` (root-first, live nodes, as in a match/insert result) in use.

        Changes: lock counts along the path. Locked nodes are never evicted, demoted or
        dropped (explicit promotion is allowed). ``ValueError`` if ``path`` is not a root path.
        """
        self._check_root_path(path)
        locked = self._locked_tokens
        for node in path:
            if not node.lock_count:
                locked[node.tier] += node.tokens
            node.lock_count += 1

    def unlock(self, path: Sequence[Node]) -> None:
        """Undo one :meth:`lock` of the same ``path``; nodes reaching zero become evictable.

        ``ValueError`` if ``path`` is not a root path or a node is not locked.
        """
        self._check_root_path(path)
        if any(not node.lock_count for node in path):
            raise ValueError("unlock of a node that is not locked")
        locked = self._locked_tokens
        for node in reversed(path):
            node.lock_count -= 1
            if not node.lock_count:
                locked[node.tier] -= node.tokens
                self._refresh(node)

    def retain(self, nodes: Sequence[Node], until: float, now: float) -> int:
        """Soft-retain ``nodes`` until time ``until`` (a deadline, not a pin).

        Changes: ``retain_until = max(retain_until, until)`` on each live node, which raises its
        eviction priority under a retention-aware strategy (``retention``) and is ignored by
        others. Returns the tokens whose retention was extended; deadlines ``<= now`` do nothing.
        """
        if until <= now:
            return 0
        return self._set_retention([n for n in nodes if n.retain_until < until], until)

    def end_retention(self, nodes: Sequence[Node], now: float) -> int:
        """End the soft retention of ``nodes`` at ``now``, before its deadline (the program
        came back, or ended, sooner than predicted).

        Changes: clears ``retain_until`` (to ``-inf``) on each live node retained past
        ``now``, so it ranks as ordinary cache again: by its last access, not as if used now
        (a deadline of ``now`` would outrank everything used since its last access). A
        retention whose deadline passed is left as it is: it ages from its deadline. Returns
        the tokens released.
        """
        return self._set_retention([n for n in nodes if n.retain_until > now], _NEG_INF)

    def _set_retention(self, nodes: Sequence[Node], until: float) -> int:
        """Set the retention deadline of each live node to ``until``, re-ranking evictable
        ones; the tokens changed."""
        tokens = 0
        for node in nodes:
            if node.dead:
                continue
            node.retain_until = until
            tokens += node.tokens
            if not node.lock_count and not node.child_tiers[node.tier]:
                self._refresh(node)
        return tokens

    def hold(self, nodes: Sequence[Node]) -> None:
        """Soft-hold ``nodes`` for a queued call that will use them (undo with :meth:`unhold`).

        Changes: ``queued_holds`` on each live node, which a hold-aware strategy
        (``retention``) ranks after everything else: unlike a lock, a gate that may reclaim
        soft-protected KV (``make_room(max_priority=None)``) can still take it, last.
        """
        self._count_holds(nodes, 1)

    def unhold(self, nodes: Sequence[Node]) -> None:
        """Undo one :meth:`hold` of the same ``nodes`` (dead ones are skipped)."""
        self._count_holds(nodes, -1)

    def held_tokens(self, tier: Tier) -> int:
        """Tokens on ``tier`` that eviction could free but a queued call holds: what admission
        under the retention gate cannot take (O(held nodes))."""
        return sum(
            n.tokens for n in self._held if not n.dead and n.tier is tier and not n.lock_count
        )

    def _count_holds(self, nodes: Sequence[Node], step: int) -> None:
        held = self._held
        for node in nodes:
            if node.dead:
                held.discard(node)
                continue
            node.queued_holds += step
            if node.queued_holds:
                held.add(node)
            else:
                held.discard(node)
            if not node.lock_count and not node.child_tiers[node.tier]:
                self._refresh(node)

    def refresh(self, nodes: Sequence[Node]) -> None:
        """Re-read the strategy's priority of ``nodes`` after outside state it reads changed."""
        for node in nodes:
            if not node.dead:
                self._refresh(node)

    # ------------------------------------------------------------------ explicit placement
    def move(self, nodes: Sequence[Node], tier: Tier, now: float) -> MoveResult:
        """Move ``nodes`` to ``tier`` (tool-wait offload, or reload before a call).

        Promotion (to a faster tier) also promotes slower ancestors, root-first, and is allowed
        for locked nodes; it is all-or-nothing and evicts from ``tier`` to make room, sparing
        the promoted paths. Demotion also demotes each node's descendants that live on faster
        tiers (children never sit on a faster tier than their parent); locked nodes are skipped
        and so is a node for which ``tier`` has no room after eviction, which never evicts a
        node this call demoted as asked or one asked that was there already. Promotion evicts
        all or nothing and lends victims the room the promoted nodes leave on the tier they
        are demoted to (a swap, see :meth:`promote`). Dead nodes are skipped.
        Promotions run before demotions (a call mixes both only with DISK); making room for a
        demotion spares what the call promoted, as it is asked there (``moves`` is
        chronological, so replaying it stays consistent).
        """
        result = MoveResult(tier)
        promote: list[Node] = []
        demote: list[Node] = []
        for node in nodes:
            if node.dead:
                result.skipped_tokens += node.tokens
            elif node.tier > tier:
                promote.append(node)
            elif node.tier < tier:
                demote.append(node)
        if promote:
            self._promote(promote, tier, now, result, 0, None)
        # requested nodes this call demoted, alone or in an earlier one's subtree, and those
        # already there: room for the rest is not made of them
        asked = {id(node) for node in demote}
        moved = [n for n in nodes if not n.dead and n.tier == tier] if demote else []
        for node in demote:
            self._demote(node, tier, now, result, moved, asked)
        return result

    def promote(
        self,
        nodes: Sequence[Node],
        tier: Tier,
        now: float,
        *,
        room: int = 0,
        max_priority: float | None = None,
    ) -> MoveResult:
        """Promote ``nodes`` to ``tier`` as :meth:`move` does, and leave ``room`` more tokens
        free there (a call's admission: the reload of its prefix and its own KV), all or
        nothing: when eviction (of candidates with priority at most ``max_priority``, if
        given) cannot make the room for both, nothing changes and ``ok`` is False
        (``skipped_tokens`` then counts ``room`` too). A victim demoted to the tier a
        promoted node leaves may take the room it leaves (a swap). Nodes already on ``tier``
        or faster stay where they are (the room is not made of them); dead nodes are ignored.
        """
        result = MoveResult(tier)
        slower = [n for n in nodes if not n.dead and n.tier > tier]
        there = [n for n in nodes if not n.dead and n.tier <= tier]
        # pinned so the eviction cannot make the room of them: the simulator's admission
        # passes only the slower nodes of a path it locked, but a caller may pass a whole set
        for node in there:
            self._pin(node)
        self._promote(slower, tier, now, result, room, max_priority)
        for node in there:
            self._unpin(node)
        return result

    @staticmethod
    def landing(nodes: Sequence[Node], at: float) -> None:
        """Record that the copy which moved ``nodes`` to their tier ends at ``at`` (their
        ``lands_at``): a call matching them reads their KV no earlier. Changes nothing else."""
        for node in nodes:
            node.lands_at = at

    @staticmethod
    def landed_at(path: Sequence[Node]) -> float:
        """When every node of ``path`` can be read: the latest ``lands_at`` (``-inf`` when no
        copy to them is recorded)."""
        return max((node.lands_at for node in path), default=-float("inf"))

    def drop(self, nodes: Sequence[Node], now: float) -> MoveResult:
        """Drop ``nodes`` and their subtrees from the index (the recompute policy).

        Locked nodes are skipped (``skipped_tokens``); already-dropped nodes are ignored.
        ``now`` is unused (kept for a uniform signature with the other operations).
        """
        result = MoveResult(None)
        for node in nodes:
            if node.dead:
                continue
            if node.lock_count:
                result.skipped_tokens += node.tokens
                continue
            start = len(result.moves)
            self._drop(node, result.moves, False)
            result.moved_tokens += sum(m.tokens for m in result.moves[start:])
        return result

    @staticmethod
    def owned_suffix(path: Sequence[Node], owner: str) -> list[Node]:
        """The longest suffix of ``path`` whose nodes ``owner`` inserted (its private context)."""
        start = len(path)
        while start > 0 and path[start - 1].owner == owner:
            start -= 1
        return list(path[start:])

    def check_integrity(self) -> None:
        """Check every invariant in O(nodes); raises ``AssertionError`` naming the first broken."""
        check_integrity(self)

    # ------------------------------------------------------------------ internals
    def _check_root_path(self, path: Sequence[Node]) -> None:
        prev = self._root
        for node in path:
            if node.parent is not prev or node.dead:
                raise ValueError(f"not a root path of live nodes at {node!r}")
            prev = node

    def _promote(
        self,
        nodes: list[Node],
        tier: Tier,
        now: float,
        out: MoveResult,
        room: int,
        max_priority: float | None,
    ) -> None:
        """Promote ``nodes`` and their slower ancestors to ``tier`` leaving ``room`` tokens
        free there besides, or change nothing (see :meth:`promote`)."""
        todo: list[Node] = []
        bottoms: list[Node] = []  # pinning these protects every promoted node and its ancestors
        seen: set[int] = set()
        for node in reversed(nodes):  # deepest first for root-first paths: one pin per path
            chain: list[Node] = []
            n = node
            while n.tier > tier and id(n) not in seen:
                seen.add(id(n))
                chain.append(n)
                assert n.parent is not None
                n = n.parent
            if chain:
                bottoms.append(node)
                chain.reverse()  # root-first; the chain's parent is faster or already in todo
                todo.extend(chain)
        need = sum(n.tokens for n in todo)
        for node in bottoms:
            self._pin(node)
        if self.free(tier) < need + room:
            # a swap: the promoted nodes leave the tier victims are demoted to, so lend that
            # room to the eviction, or a victim finds the tier full, is dropped, and the room
            # is left empty. All or nothing, so the loan is repaid by the promotion below.
            below = self._demote_to[tier]
            lent = 0 if below is None else sum(n.tokens for n in todo if n.tier == below)
            if below is not None:
                self._capacity[below] += lent
            made = self.make_room(
                tier, need + room, now, max_priority=max_priority, all_or_nothing=True
            )
            if below is not None:
                self._capacity[below] -= lent
            out.moves.extend(made.moves)
        if self.free(tier) >= need + room:
            for n in todo:
                src = n.tier
                self.counters.promoted_tokens[tier] += n.tokens
                self._set_tier(n, tier)
                out.moves.append(KVMove(n, n.tokens, src, tier))
            out.moved_tokens += need
        else:
            out.skipped_tokens += need + room
        for node in bottoms:
            self._unpin(node)

    def _demote(
        self,
        node: Node,
        tier: Tier,
        now: float,
        out: MoveResult,
        spare: list[Node],
        asked: set[int],
    ) -> None:
        """Demote ``node`` and its faster descendants to ``tier``, never evicting ``spare``;
        the nodes moved whose ids are in ``asked`` join ``spare``."""
        if node.dead or node.tier >= tier:
            return  # already moved as part of an earlier node's subtree
        todo: list[Node] = []
        stack = [node]
        while stack:
            n = stack.pop()
            if n.lock_count:
                out.skipped_tokens += node.tokens
                return
            todo.append(n)
            stack.extend(c for c in n.children.values() if c.tier < tier)
        need = sum(n.tokens for n in todo)
        if self.free(tier) < need:
            for moved in spare:  # pinned while room is made: never evict what was just asked
                self._pin(moved)
            # nor what is retained there until a deadline still to come (another program's
            # offloaded context, kept for its return): this one stays where it is instead
            out.moves.extend(self.make_room(tier, need, now, max_priority=now).moves)
            for moved in spare:
                self._unpin(moved)
        if self.free(tier) < need:
            out.skipped_tokens += need
            return
        for n in reversed(todo):  # children before parents keeps tiers monotone at each step
            src = n.tier
            self.counters.demoted_tokens[src] += n.tokens
            self._set_tier(n, tier)
            out.moves.append(KVMove(n, n.tokens, src, tier))
            if id(n) in asked:
                spare.append(n)
        out.moved_tokens += need
