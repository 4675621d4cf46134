"""The ready queue: waiting LLM calls in fairness-guarded policy order, O(log n) per decision.

Semantics are exactly "the minimum effective key" of :class:`FairnessGuard` over all waiting
calls (``ordered()`` computes that by sorting; a property test checks the heaps agree), but a
decision costs O(T + log n) for T tenants: one heap per tenant ordered by policy key plus one
heap ordered by starvation time. Removal is lazy (entries are marked dead), so aborts are O(1).
Policy keys are computed once, on push; ``rekey`` recomputes them for a program whose standing
changed (operator boost) and ``set_policy`` for everyone.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agentconsole.scheduler.fairness import TIER_STARVING, FairnessGuard
from agentconsole.scheduler.policies.base import Policy
from agentconsole.scheduler.ticket import CallTicket


@dataclass(slots=True)
class QueueEntry:
    ticket: CallTicket
    key: float
    starve_at: float
    alive: bool = True
    #: the effective key ``(tier, key, seq)`` this entry had when ``peek`` last chose it
    rank: tuple[int, float, int] = (0, 0.0, 0)


_HeapItem = tuple[float, int, QueueEntry]


class ReadyQueue:
    def __init__(self, policy: Policy, guard: FairnessGuard) -> None:
        self.policy = policy
        self.guard = guard
        self._entries: dict[str, QueueEntry] = {}
        self._by_tenant: dict[str, list[_HeapItem]] = {}
        self._alive_per_tenant: dict[str, int] = {}
        self._starving: list[_HeapItem] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._entries

    def __iter__(self) -> Iterator[QueueEntry]:
        return iter(self._entries.values())

    def tenants(self) -> list[str]:
        """The tenants with calls waiting (O(tenants), however long the queue)."""
        return [t for t, n in self._alive_per_tenant.items() if n > 0]

    def entry(self, call_id: str) -> QueueEntry | None:
        """The queued entry of ``call_id`` (its ticket and policy key), if queued."""
        return self._entries.get(call_id)

    def push(self, ticket: CallTicket, now: float) -> QueueEntry:
        """Queue ``ticket`` (its ``seq`` is assigned here). Raises if the id is queued."""
        if ticket.call_id in self._entries:
            raise ValueError(f"call {ticket.call_id!r} is already queued")
        self._seq += 1
        ticket.seq = self._seq
        entry = QueueEntry(ticket, self.policy.key(ticket, now), self.guard.starve_at(ticket))
        self._insert(entry)
        return entry

    def _insert(self, entry: QueueEntry) -> None:
        ticket = entry.ticket
        self._entries[ticket.call_id] = entry
        heapq.heappush(
            self._by_tenant.setdefault(ticket.tenant, []), (entry.key, ticket.seq, entry)
        )
        self._alive_per_tenant[ticket.tenant] = self._alive_per_tenant.get(ticket.tenant, 0) + 1
        if entry.starve_at != float("inf"):
            heapq.heappush(self._starving, (entry.starve_at, ticket.seq, entry))

    def remove(self, call_id: str) -> CallTicket | None:
        """Take ``call_id`` out of the queue; returns its ticket, or None if not queued."""
        entry = self._entries.pop(call_id, None)
        if entry is None:
            return None
        entry.alive = False
        self._alive_per_tenant[entry.ticket.tenant] -= 1
        return entry.ticket

    def peek(self, now: float) -> QueueEntry | None:
        """The call that should run next, without removing it."""
        best: tuple[int, float, int] | None = None
        best_entry: QueueEntry | None = None
        starving = self._top(self._starving)
        if starving is not None and starving[0] <= now:
            best, best_entry = (TIER_STARVING, starving[0], starving[1]), starving[2]
        backlogged = self.tenants()
        underserved = self.guard.underserved(backlogged, now)
        for tenant in backlogged:
            top = self._top(self._by_tenant[tenant])
            if top is None:
                continue
            cand = (self.guard.tier(top[2].ticket, now, underserved), top[0], top[1])
            if cand[0] == TIER_STARVING:  # starving entries are ranked via the starving heap
                continue
            if best is None or cand < best:
                best, best_entry = cand, top[2]
        if best_entry is not None and best is not None:
            best_entry.rank = best
        return best_entry

    def pop(self, now: float) -> CallTicket | None:
        entry = self.peek(now)
        if entry is None:
            return None
        self.remove(entry.ticket.call_id)
        return entry.ticket

    def ordered(self, now: float) -> list[QueueEntry]:
        """All waiting calls in run order (O(n log n); for snapshots and equivalence tests)."""
        underserved = self.guard.underserved(self.tenants(), now)
        return sorted(
            self._entries.values(),
            key=lambda e: self.guard.effective_key(e.ticket, e.key, now, underserved),
        )

    def rekey(self, program_id: str, update: Callable[[CallTicket], None], now: float) -> int:
        """Apply ``update`` to the tickets of ``program_id`` and re-rank them; returns how many."""
        mine = [e for e in self._entries.values() if e.ticket.program_id == program_id]
        for entry in mine:
            self.remove(entry.ticket.call_id)
            update(entry.ticket)
            self._insert(
                QueueEntry(
                    entry.ticket,
                    self.policy.key(entry.ticket, now),
                    self.guard.starve_at(entry.ticket),
                )
            )
        return len(mine)

    def set_policy(self, policy: Policy, now: float) -> None:
        """Switch policy and re-rank every waiting call under it."""
        entries = list(self._entries.values())
        self.policy = policy
        self._entries.clear()
        self._by_tenant.clear()
        self._alive_per_tenant.clear()
        self._starving.clear()
        for entry in entries:
            entry.alive = False
            self._insert(QueueEntry(entry.ticket, policy.key(entry.ticket, now), entry.starve_at))

    @staticmethod
    def _top(heap: list[_HeapItem]) -> _HeapItem | None:
        while heap and not heap[0][2].alive:
            heapq.heappop(heap)
        return heap[0] if heap else None
