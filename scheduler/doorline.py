"""The line at the program door: who of the waiting newcomers starts first.

First come first served makes the median program wait behind every earlier arrival, short or
long: in a burst of agent programs the k-th arrival finishes at about k over the service rate
whatever its size. The line orders by **response ratio** instead (highest response ratio next,
Brinch Hansen 1971): ``(waited + expected run) / expected run``, where the expected run is the
mean time programs of the same kind took from their start to their finish (learned online, per
tenant and ``workload`` or ``agent`` label, never from another tenant's programs:
``growth.RunTimes``). A short kind goes ahead of a long one that arrived at about the same
time; every waiting program's ratio grows with its wait, and faster the shorter it is, so a
long program is passed only by programs short against its own wait and none waits forever (a
newcomer's ratio is 1, the lowest there is). Only relative sizes matter: scaling every expected
run by one factor orders the same. While a waiting program's tenant has no program finished
yet, or with no estimate given, the line is first come first served. A kind none of whose
programs (of its tenant) finished yet is expected to run at least as long as its tenant's
longest running program of it had when the waiting one queued (a kind that has not finished
is not a short one; the floor is fixed at the queueing, so the ratio still grows with the
wait).

The line is shared between tenants as the engines' fairness guard shares service
(``fairness.below_share``, one notion of a share): a tenant whose started programs the door
counts hold less than ``(1 - share_slack)`` of its weighted share of what the door counts (its
currency: the predicted private tokens it budgets, not a count of programs: twenty 110K-token
programs are not the same claim on memory as twenty 8-token ones) is *below its share*, and its
programs go ahead of every other tenant's; within that and among the rest, the order above.
One tenant alone is never below its share: its line is exactly the order above.

Nobody is skipped for fitting within a tenant: when a tenant's first in line does not fit, its
programs behind it wait too (a large program is never starved by smaller ones of its own
tenant that fit around it). Across tenants a program that fits in what is free may pass the
waiting programs ahead of it only where its tenant, with it started, holds no more (weighted)
than each of theirs does: a tenant holding much cannot keep a tenant holding little out with
one program too big for the room left, and the big program's bound stands (those passing it
never hold more than its tenant does; that falls as its tenant's started programs end, and
once its tenant holds nothing nobody passes it and it is below its share, ahead of every
tenant that is not: it then waits only for the memory it needs to free up).

A program that stops waiting (serve answers 503 with Retry-After) keeps its place and its wait
for ``place_kept_s``: its retry resumes where it was, among its own tenant's programs and
against tenants of its tenant's standing. A tenant below its share still goes ahead of it, and
one holding less passes it into room it cannot use, so one tenant's retries cannot hold the
line against another.

Started programs the door parked at a call boundary wait in a line of their own
(:class:`ReturningLine`), first come first served and ahead of every newcomer (their contexts
are half-built); one whose caller stopped waiting keeps its place there too.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from agentconsole.scheduler.fairness import FairnessConfig, below_share

#: what a program's expected run is learned under: (tenant, kind)
RunKey = tuple[str, str]
#: the expected seconds from start to finish of a kind of program, given a floor for a kind
#: none of whose programs finished yet (None: nothing learned)
RunEstimate = Callable[[RunKey, float], float | None]
#: an expected run shorter than this counts as this (a ratio needs a positive size)
MIN_RUN_S = 1e-3
#: whether a program predicted to reach so many private tokens fits in what is free now
Fits = Callable[[int], bool]
#: the order of a program in line: its tenant's standing (0 below its share, else 1), then
#: minus its response ratio, then its place
LineKey = tuple[int, float, int]


@dataclass(slots=True)
class Waiting:
    """A program in line: its predicted private tokens, its place, since when it waits, its
    kind (what its expected run is learned under), and how long the longest running program
    of its kind had run when it queued (a floor on its expected run while none of the kind
    finished; fixed then, so its ratio keeps growing with its wait)."""

    program_id: str
    tokens: int
    place: int
    since: float
    kind: RunKey
    floor_s: float = 0.0


class WaitingLine:
    """Newcomers waiting at the door, in the order they go (see the module docstring).

    Within one kind the oldest wait has the highest ratio, so each kind keeps a heap by wait
    and :meth:`first` compares the kinds' heads: O(kinds) a decision, however long the line
    (O(kinds²) for :meth:`next_start` where heads wait that do not fit).

    ``tenant_tokens`` is the door's own count of what each tenant's started programs hold
    (read, never written here); ``fairness`` the shares' weights and slack (disabled: the line
    ignores tenants, as the guard then does).
    """

    def __init__(
        self,
        expected_run_s: RunEstimate | None,
        place_kept_s: float,
        *,
        tenant_tokens: Mapping[str, int] | None = None,
        fairness: FairnessConfig | None = None,
    ) -> None:
        self.expected_run_s = expected_run_s
        self.place_kept_s = place_kept_s
        self.tenant_tokens: Mapping[str, int] = {} if tenant_tokens is None else tenant_tokens
        self.fairness = fairness or FairnessConfig()
        self._waiting: dict[str, Waiting] = {}
        #: per kind, (since, place, program) of its entries; a program no longer in line (or
        #: in line again at another place) is dropped when it surfaces
        self._by_kind: dict[RunKey, list[tuple[float, int, str]]] = {}
        #: programs that stopped waiting -> (their entry, kept until)
        self._kept: dict[str, tuple[Waiting, float]] = {}
        self._places = itertools.count()
        self.tokens = 0  # predicted private tokens of the programs in line

    def entry(
        self, program_id: str, tokens: int, kind: RunKey, now: float, floor_s: float = 0.0
    ) -> tuple[Waiting, bool]:
        """The entry of ``program_id`` asking to start now (not yet in line; ``floor_s``: see
        :class:`Waiting`) and whether it resumes a kept place (True) rather than taking a new
        one at the end."""
        kept, until = self._kept.pop(program_id, (None, 0.0))
        if kept is not None and until > now:
            return replace(kept, tokens=tokens, kind=kind), True
        return Waiting(program_id, tokens, next(self._places), now, kind, floor_s), False

    def first(self, now: float, candidate: Waiting | None = None) -> Waiting | None:
        """Who goes first now among those in line and ``candidate`` (None: nobody)."""
        heads = self._heads()
        if candidate is not None:
            heads.append(candidate)
        if len(heads) <= 1:
            return heads[0] if heads else None
        return min(self._keyed(heads, now), key=_line_key)[1]

    def next_start(
        self, now: float, fits: Fits, candidate: Waiting | None = None
    ) -> Waiting | None:
        """Who starts now among those in line and ``candidate``: the first in line whose
        predicted tokens ``fits``, unless it must wait for programs ahead of it that do not
        (those of its own tenant, and those of tenants holding less than its own would with
        it started: see the module docstring). None: nobody starts now."""
        heads = self._heads()
        if candidate is not None:
            heads.append(candidate)
        if len(heads) <= 1:
            return heads[0] if heads and fits(heads[0].tokens) else None
        shared = self.fairness.enabled
        #: tenants with a program ahead that waits -> (what they hold, their weight)
        ahead: dict[str, tuple[int, float]] = {}
        for _, entry in sorted(self._keyed(heads, now), key=_line_key):
            tenant = entry.kind[0]
            if tenant in ahead or (not shared and len(ahead) > 0):
                continue  # nobody passes its own tenant's programs for fitting (unshared: any)
            weight = self.fairness.weight(tenant)
            with_it = self.tenant_tokens.get(tenant, 0) + entry.tokens
            passes = all(
                with_it * their_weight <= theirs * weight for theirs, their_weight in ahead.values()
            )
            if passes and fits(entry.tokens):
                return entry
            ahead[tenant] = (self.tenant_tokens.get(tenant, 0), weight)
        return None

    def _keyed(self, heads: list[Waiting], now: float) -> list[tuple[LineKey, Waiting]]:
        """``heads`` with their order in line (the lowest key goes first)."""
        below: frozenset[str] = frozenset()
        if self.fairness.enabled:  # off (the guard's switch): one line for every tenant
            tenants = frozenset(e.kind[0] for e in heads)
            below = below_share(self.tenant_tokens, tenants, self.fairness)
        estimate = self.expected_run_s
        runs = [estimate(e.kind, e.floor_s) for e in heads] if estimate else []
        known = sorted(run for run in runs if run is not None)
        if not known:  # nothing learned: first come first served
            return [((_standing(e, below), 0.0, e.place), e) for e in heads]
        # a head whose tenant finished no program of its kind yet counts as a middling one:
        # one such program must not turn the whole line first come first served (a tenant
        # whose programs never finish would hold every other tenant's short ones behind long)
        middling = known[len(known) // 2]
        keyed: list[tuple[LineKey, Waiting]] = []
        for e, run in zip(heads, runs, strict=True):
            # a middling one runs at least as long as its tenant's longest running program of
            # its kind has run so far (``floor_s``: it has not finished, it is no short one)
            size = max(max(middling, e.floor_s) if run is None else run, MIN_RUN_S)
            ratio = (now - e.since + size) / size  # highest ratio, then earliest
            keyed.append(((_standing(e, below), -ratio, e.place), e))
        return keyed

    def add(self, entry: Waiting) -> None:
        """``entry`` waits in line (in place of an entry the program had)."""
        if entry.program_id in self._waiting:
            self.take(entry.program_id)
        self._waiting[entry.program_id] = entry
        heap = self._by_kind.setdefault(entry.kind, [])
        heapq.heappush(heap, (entry.since, entry.place, entry.program_id))
        self.tokens += entry.tokens

    def take(self, program_id: str) -> Waiting:
        """``program_id`` leaves the line to start."""
        entry = self._waiting.pop(program_id)
        self.tokens -= entry.tokens
        return entry

    def leave(self, program_id: str, now: float) -> bool:
        """``program_id``'s caller stopped waiting: out of line, its place and wait kept for
        ``place_kept_s``. False when it was not in line."""
        if program_id not in self._waiting:
            return False
        entry = self.take(program_id)
        self._kept = {pid: kept for pid, kept in self._kept.items() if kept[1] > now}
        self._kept[program_id] = (entry, now + self.place_kept_s)
        return True

    def forget(self, program_id: str) -> None:
        """``program_id`` ended (cancelled while waiting): out of line, no place kept."""
        if program_id in self._waiting:
            self.take(program_id)
        self._kept.pop(program_id, None)

    def _heads(self) -> list[Waiting]:
        """The longest-waiting entry of each kind in line (stale heap entries dropped)."""
        heads: list[Waiting] = []
        for kind, heap in list(self._by_kind.items()):
            while heap:
                entry = self._waiting.get(heap[0][2])
                if entry is not None and (entry.place, entry.kind) == (heap[0][1], kind):
                    heads.append(entry)
                    break
                heapq.heappop(heap)
            if not heap:
                del self._by_kind[kind]
        return heads

    def holds_place(self, program_id: str, now: float) -> bool:
        """``program_id`` is in line, or stopped waiting and keeps its place."""
        kept = self._kept.get(program_id)
        return program_id in self._waiting or (kept is not None and kept[1] > now)

    def __contains__(self, program_id: object) -> bool:
        return program_id in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)


def _standing(entry: Waiting, below: frozenset[str]) -> int:
    """0 where ``entry``'s tenant is below its share at the door (it goes ahead), else 1."""
    return 0 if entry.kind[0] in below else 1


def _line_key(keyed: tuple[LineKey, Waiting]) -> LineKey:
    return keyed[0]


class ReturningLine:
    """Started programs parked at a call boundary, in the order they go on. One whose caller
    stopped waiting is *away*: it keeps its place until a time and holds no one up meanwhile."""

    def __init__(self, place_kept_s: float) -> None:
        self.place_kept_s = place_kept_s
        self._order: deque[str] = deque()
        self._away: dict[str, float] = {}  # program -> until when it keeps its place

    def park(self, program_id: str) -> None:
        """``program_id`` waits at the end of the line."""
        self._order.append(program_id)

    def step_away(self, program_id: str, now: float) -> None:
        """``program_id``'s caller stopped waiting (if it is in line): its place is kept for
        ``place_kept_s``."""
        if program_id in self._order:
            self._away[program_id] = now + self.place_kept_s

    def back(self, program_id: str, now: float) -> bool:
        """``program_id``'s retry came: True when it was away and is back at its place; False
        when it was not away, or its place lapsed (then it is out of the line)."""
        until = self._away.pop(program_id, None)
        if until is None:
            return False
        if until <= now:
            self._order.remove(program_id)
            return False
        return True

    def let_through_if_away(self, program_id: str) -> None:
        """``program_id`` has a call again while away: it leaves the line (it goes on)."""
        if self._away.pop(program_id, None) is not None:
            self._order.remove(program_id)

    def remove(self, program_id: str) -> None:
        """``program_id`` goes on or ended: out of the line."""
        if program_id in self._order:
            self._order.remove(program_id)
        self._away.pop(program_id, None)

    def waiting(self, now: float) -> list[str]:
        """The programs whose calls wait, in line; a place kept past its time is given up."""
        for pid, until in list(self._away.items()):
            if until <= now:
                del self._away[pid]
                self._order.remove(pid)
        return [pid for pid in self._order if pid not in self._away]

    def clear(self) -> list[str]:
        """Everyone leaves the line (the door is off); returns them, in line order."""
        out = list(self._order)
        self._order.clear()
        self._away.clear()
        return out

    def is_waiting(self, program_id: str) -> bool:
        """``program_id`` is in line and its call waits (it is not away)."""
        return program_id in self._order and program_id not in self._away

    @property
    def away(self) -> int:
        """Programs in line whose callers stopped waiting."""
        return len(self._away)

    def __contains__(self, program_id: object) -> bool:
        return program_id in self._order

    def __len__(self) -> int:
        return len(self._order)
