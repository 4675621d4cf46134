"""The ready queue: waiting LLM calls in fairness-guarded policy order, O(log n) per decision.

Semantics are exactly "the minimum effective key" of :class:`FairnessGuard` over all waiting
calls (``ordered()`` computes that by sorting; a property test checks the heaps agree), but a
decision costs O(T + log n) for T tenants: per tenant, one heap ordered by policy key and one
ordered by starvation time (a tenant's starving calls rank by its share, so they are kept
apart), and one heap of every entry by starvation time, whose top says whether anything starves.
Removal is lazy (entries are marked dead), so aborts are O(1); a tenant's heaps go when its last
call leaves, and the starving heaps are rebuilt once their dead items outnumber the live
entries (below saturation nothing starves, so no decision pops them), amortised O(1).

Policy keys are computed once, on push, with how they move (``Policy.moving_key``): a key that
falls a second per second (a slack shrinking as the call waits) sits in a second heap per
tenant by its key plus the time, a constant, and is compared at the decision's time; a heap of
the times keys change asks the policy again only then. So the order is the one a queue that
re-keyed every call at every decision would have (the SGLang plugin re-keys every pass).
``rekey`` recomputes keys for a program whose standing changed (operator boost) and
``set_policy`` for everyone.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agentconsole.scheduler.fairness import (
    STARVING_TIERS,
    TIER_NORMAL,
    TIER_UNDERSERVED,
    FairnessGuard,
    tier_of,
)
from agentconsole.scheduler.policies.base import MovingKey, Policy
from agentconsole.scheduler.ticket import CallTicket


@dataclass(slots=True)
class QueueEntry:
    ticket: CallTicket
    #: the policy key; while ``falling``, the key plus the time (constant as the key falls)
    key: float
    starve_at: float
    alive: bool = True
    #: the tier ``peek`` last chose it in (-1: never chosen)
    tier: int = -1
    #: the tie-break its heap items carry (the ticket's ``seq`` when it was queued)
    seq: int = 0
    #: the key falls one second per second (``MovingKey.falling``)
    falling: bool = False
    #: when the policy is asked again how the key moves (``math.inf``: never)
    until: float = math.inf

    def key_at(self, now: float) -> float:
        """The policy key at ``now`` (valid up to ``until``)."""
        return self.key - now if self.falling else self.key

    def rank_at(self, now: float) -> tuple[int, float, int]:
        """The effective key ``(tier, key, seq)`` at ``now``, in the tier ``peek`` last chose
        it in (a starving call's is ``(tier, starve_at, seq)``; ``(0, 0.0, 0)`` if never chosen).
        Built when asked, so a decision leaves no tuple behind for the collector."""
        tier = self.tier
        if tier < 0:
            return (0, 0.0, 0)
        return (tier, self.starve_at if tier in STARVING_TIERS else self.key_at(now), self.seq)

    def moves(self) -> bool:
        """Whether the key moves with time (then a holder re-reads it with ``rank_at``)."""
        return self.falling or self.until != math.inf

    def follow(self, moving: MovingKey, now: float) -> bool:
        """Take ``moving`` (the policy's answer at ``now``) as the key's course; returns
        whether the heap value (``key``, ``falling``) changed."""
        key = moving.key + now if moving.falling else moving.key
        # asked again only once time has passed ``until`` (never twice at the same instant)
        self.until = max(moving.until, now)
        if key == self.key and moving.falling == self.falling:
            return False
        self.key, self.falling = key, moving.falling
        return True


def _new_entry(ticket: CallTicket, moving: MovingKey, starve_at: float, now: float) -> QueueEntry:
    entry = QueueEntry(ticket, math.nan, starve_at)
    entry.follow(moving, now)
    return entry


_HeapItem = tuple[float, int, QueueEntry]
_heappush, _heappop = heapq.heappush, heapq.heappop
#: dead items the starving heaps may hold beyond twice the live entries before a rebuild
_REBUILD_SLACK = 1024


def _keep_alive(heap: list[_HeapItem]) -> None:
    """Drop ``heap``'s items of removed entries, in place (O(n))."""
    heap[:] = [item for item in heap if item[2].alive]
    heapq.heapify(heap)


def _stale(item: _HeapItem) -> bool:
    """Whether a tenant heap's item no longer stands for its entry (removed, or its key moved:
    the entry was pushed again with its new key)."""
    entry = item[2]
    return not entry.alive or item[0] != entry.key


class ReadyQueue:
    def __init__(self, policy: Policy, guard: FairnessGuard) -> None:
        self.policy = policy
        self.guard = guard
        self._entries: dict[str, QueueEntry] = {}
        self._by_tenant: dict[str, list[_HeapItem]] = {}
        #: per tenant, the entries whose key falls, by key plus time (made on first use)
        self._falling_by_tenant: dict[str, list[_HeapItem]] = {}
        #: entries by when their policy is asked again (``QueueEntry.until``)
        self._moves: list[_HeapItem] = []
        self._alive_per_tenant: dict[str, int] = {}
        # the tenants with calls waiting, in ``_alive_per_tenant``'s order, and as the set the
        # guard's share decision is cached on: rebuilt only when a tenant's count reaches or
        # leaves zero, not per decision
        self._backlog: tuple[str, ...] = ()
        self._backlog_set: frozenset[str] = frozenset()
        #: per tenant, the entries that will starve, by when (made on first use); and all of
        #: them in one heap, whose top says whether any call starves at all (mostly not)
        self._starving_by_tenant: dict[str, list[_HeapItem]] = {}
        self._starving: list[_HeapItem] = []
        #: items in the per-tenant starving heaps, dead ones included (their rebuild's trigger)
        self._starving_items = 0
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._entries

    def __iter__(self) -> Iterator[QueueEntry]:
        return iter(self._entries.values())

    def tenants(self) -> list[str]:
        """The tenants with calls waiting (O(tenants), however long the queue)."""
        return list(self._backlog)

    def _backlog_changed(self) -> None:
        self._backlog = tuple(t for t, n in self._alive_per_tenant.items() if n > 0)
        self._backlog_set = frozenset(self._backlog)

    def entry(self, call_id: str) -> QueueEntry | None:
        """The queued entry of ``call_id`` (its ticket and policy key), if queued."""
        return self._entries.get(call_id)

    def push(self, ticket: CallTicket, now: float) -> QueueEntry:
        """Queue ``ticket`` (its ``seq`` is assigned here). Raises if the id is queued."""
        if ticket.call_id in self._entries:
            raise ValueError(f"call {ticket.call_id!r} is already queued")
        self._seq += 1
        ticket.seq = self._seq
        entry = _new_entry(
            ticket, self.policy.moving_key(ticket, now), self.guard.starve_at(ticket), now
        )
        self._insert(entry)
        return entry

    def _insert(self, entry: QueueEntry) -> None:
        ticket = entry.ticket
        tenant = ticket.tenant
        seq = entry.seq = ticket.seq
        self._entries[ticket.call_id] = entry
        self._push_key(entry)
        if entry.until != math.inf:
            _heappush(self._moves, (entry.until, seq, entry))
        alive = self._alive_per_tenant
        waiting = alive.get(tenant, 0)
        alive[tenant] = waiting + 1
        if not waiting:
            self._backlog_changed()
        if entry.starve_at != math.inf:
            item = (entry.starve_at, seq, entry)
            _heappush(self._starving, item)
            starving = self._starving_by_tenant.get(tenant)
            if starving is None:
                starving = self._starving_by_tenant[tenant] = []
            _heappush(starving, item)
            self._starving_items += 1
            most = 2 * len(self._entries) + _REBUILD_SLACK
            if self._starving_items > most or len(self._starving) > most:
                self._rebuild_starving()

    def _push_key(self, entry: QueueEntry) -> None:
        """Put ``entry`` in its tenant's heap of static or of falling keys (a copy of it with
        an older key there is stale from now on: :func:`_stale`)."""
        tenant = entry.ticket.tenant
        heaps = self._falling_by_tenant if entry.falling else self._by_tenant
        heap = heaps.get(tenant)
        if heap is None:
            heap = heaps[tenant] = []
        _heappush(heap, (entry.key, entry.seq, entry))

    def _follow_moves(self, now: float) -> None:
        """Ask the policy again about every queued key whose course ended before ``now``."""
        moves = self._moves
        while moves and moves[0][0] < now:
            until, seq, entry = _heappop(moves)
            if entry.alive and entry.until == until:
                if entry.follow(self.policy.moving_key(entry.ticket, now), now):
                    self._push_key(entry)
                if entry.until != math.inf:
                    _heappush(moves, (entry.until, seq, entry))

    def rank_at(self, entry: QueueEntry, now: float) -> tuple[int, float, int]:
        """The effective key at ``now`` of an entry that left the queue (a running call keeps
        the tier it was chosen in; its policy key moves on as a queued one's would)."""
        if entry.until < now:
            entry.follow(self.policy.moving_key(entry.ticket, now), now)
        return entry.rank_at(now)

    def remove(self, call_id: str) -> CallTicket | None:
        """Take ``call_id`` out of the queue; returns its ticket, or None if not queued."""
        entry = self._entries.pop(call_id, None)
        if entry is None:
            return None
        entry.alive = False
        tenant = entry.ticket.tenant
        waiting = self._alive_per_tenant[tenant] - 1
        self._alive_per_tenant[tenant] = waiting
        if not waiting:
            self._backlog_changed()
            # every item left in the tenant's heaps is dead: dropped now, not when it returns
            self._by_tenant.pop(tenant, None)
            self._falling_by_tenant.pop(tenant, None)
            self._starving_items -= len(self._starving_by_tenant.pop(tenant, ()))
        return entry.ticket

    def peek(self, now: float) -> QueueEntry | None:
        """The call that should run next, without removing it.

        The minimum of :meth:`FairnessGuard.effective_key` over the waiting calls: each
        backlogged tenant's oldest starvation if it has a starving call (a tenant's starving
        call goes before its others), else its best policy key, under the tier its share
        gives. A heap top's starvation is decided here from its entry's ``starve_at`` (the
        guard's ``starve_at`` of the ticket, stored on push; the starving heaps order by the
        same value), which is :meth:`FairnessGuard.tier` without recomputing it per tenant.
        """
        if self._moves and self._moves[0][0] < now:
            self._follow_moves(now)
        backlog = self._backlog
        if not backlog:
            return None
        best: tuple[int, float, int] | None = None
        best_entry: QueueEntry | None = None
        underserved = self.guard.underserved(self._backlog_set, now)
        by_tenant, falling_by_tenant = self._by_tenant, self._falling_by_tenant
        # removed entries leave a starving heap only once they reach its top *and* are due: a
        # top not due yet means no live call is starving either (the top is the minimum), so
        # the common decision looks at one heap top and at no tenant's
        starving_any = self._starving
        if starving_any and starving_any[0][0] <= now:
            while starving_any and not starving_any[0][2].alive:
                _heappop(starving_any)
        due = bool(starving_any) and starving_any[0][0] <= now
        starving_by_tenant = self._starving_by_tenant
        for tenant in backlog:
            if due:
                starving = starving_by_tenant.get(tenant)
                while starving and starving[0][0] <= now and not starving[0][2].alive:
                    _heappop(starving)
                    self._starving_items -= 1
                if starving and starving[0][0] <= now:
                    starve_at, seq, entry = starving[0]
                    cand = (tier_of(True, tenant in underserved), starve_at, seq)
                    if best is None or cand < best:
                        best, best_entry = cand, entry
                    continue
            heap = by_tenant.get(tenant)
            while heap and (_stale(heap[0]) or heap[0][2].falling):
                _heappop(heap)
            falling = falling_by_tenant.get(tenant) if falling_by_tenant else None
            while falling and (_stale(falling[0]) or not falling[0][2].falling):
                _heappop(falling)
            if heap:
                key, seq, entry = heap[0]
                if falling and (falling[0][0] - now, falling[0][1]) < (key, seq):
                    key, seq, entry = falling[0][0] - now, falling[0][1], falling[0][2]
            elif falling:
                key, seq, entry = falling[0][0] - now, falling[0][1], falling[0][2]
            else:
                continue
            # ``tier_of(False, ...)``, inlined: this runs per tenant on every decision
            cand = (TIER_UNDERSERVED if tenant in underserved else TIER_NORMAL, key, seq)
            if best is None or cand < best:
                best, best_entry = cand, entry
        if best_entry is not None and best is not None:
            best_entry.tier = best[0]  # ``rank`` rebuilds ``best`` from it
        return best_entry

    def pop(self, now: float) -> CallTicket | None:
        entry = self.peek(now)
        if entry is None:
            return None
        ticket = entry.ticket
        self.remove(ticket.call_id)
        return ticket

    def ordered(self, now: float) -> list[QueueEntry]:
        """All waiting calls in run order (O(n log n); for snapshots and equivalence tests)."""
        self._follow_moves(now)
        underserved = self.guard.underserved(self.tenants(), now)
        return sorted(
            self._entries.values(),
            key=lambda e: self.guard.effective_key(e.ticket, e.key_at(now), now, underserved),
        )

    def rekey(self, program_id: str, update: Callable[[CallTicket], None], now: float) -> int:
        """Apply ``update`` to the tickets of ``program_id`` and re-rank them; returns how many."""
        mine = [e for e in self._entries.values() if e.ticket.program_id == program_id]
        for entry in mine:
            self.remove(entry.ticket.call_id)
        if mine:
            # the re-queued entry keeps its ``seq``, so its dead twin must leave the heaps
            # first: two items with the same (key, seq) would compare their entries (TypeError)
            self._drop_dead()
        for entry in mine:
            update(entry.ticket)
            self._insert(
                _new_entry(
                    entry.ticket,
                    self.policy.moving_key(entry.ticket, now),
                    self.guard.starve_at(entry.ticket),
                    now,
                )
            )
        return len(mine)

    def _drop_dead(self) -> None:
        """Rebuild every heap without its removed entries (O(n))."""
        for heap in (self._moves, *self._by_tenant.values(), *self._falling_by_tenant.values()):
            _keep_alive(heap)
        self._rebuild_starving()

    def _rebuild_starving(self) -> None:
        """Rebuild the starving heaps without their removed entries (O(n))."""
        _keep_alive(self._starving)
        for heap in self._starving_by_tenant.values():
            _keep_alive(heap)
        self._starving_items = sum(len(heap) for heap in self._starving_by_tenant.values())

    def set_policy(self, policy: Policy, now: float) -> None:
        """Switch policy and re-rank every waiting call under it."""
        entries = list(self._entries.values())
        self.policy = policy
        self._entries.clear()
        self._by_tenant.clear()
        self._falling_by_tenant.clear()
        self._moves.clear()
        self._alive_per_tenant.clear()
        self._backlog_changed()
        self._starving_by_tenant.clear()
        self._starving.clear()
        self._starving_items = 0
        for entry in entries:
            entry.alive = False
            moving = policy.moving_key(entry.ticket, now)
            self._insert(_new_entry(entry.ticket, moving, entry.starve_at, now))
