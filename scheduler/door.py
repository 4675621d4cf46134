"""Program-level admission: start a new program only while memory holds the working set of
those already started.

Why: above saturation, every program started competes for KV. Once the contexts the started
programs will need again soon no longer fit in HBM plus host DRAM, each new start evicts one of
them, and the engine spends its time recomputing (thrash: finished programs per second fall
while the queue grows). A stock engine cannot tell a new program from a returning one; a
program-aware server makes newcomers wait at the door instead, in line
(``doorline.WaitingLine``: highest response ratio first, by each kind's expected run, so a
short program does not wait behind every long one that came before it; shared between tenants
by the fairness guard's notion of a share, over the tokens the door counts per tenant, so one
tenant's large programs cannot keep another tenant's small ones out).

The working set is what the tool-wait policy protects: a started program counts while it has
calls in the engine, and through a tool wait for as long as its KV decision keeps (or, offloaded,
retains) its context; once that lapses, or at once when the decision drops the context, it no
longer counts until its next call (a program waiting minutes on a test suite does not hold the
door shut). A returning program never waits at the door again, even if that over-commits.

The gate only counts; the driver tells it what happens (:meth:`ProgramDoor.try_start`,
:meth:`~ProgramDoor.step_out`, :meth:`~ProgramDoor.rejoin`, :meth:`~ProgramDoor.finish`,
:meth:`~ProgramDoor.wake` at :meth:`~ProgramDoor.next_expiry`) and starts the programs each
returns. A program's size is its predicted peak working set (``resize``: the driver's growth
estimate, corrected as the program grows). When the started programs outgrow the budget
anyway and the engine loses a context the door counted (below), a started program reaching
its next call boundary is parked there
(:meth:`~ProgramDoor.park_started`) and starts again, before any newcomer, once room frees up.

The door is work-conserving when told the engines' batch (``batch_slots``, the requests they
run at once): while fewer started programs than that have calls in the engine, the next program
in line starts as soon as what the started programs hold *now* leaves room for its predicted
peak, even though their predicted peaks do not. Predictions alone would keep a slot idle while
the started programs wait on tools (a compute-bound engine then runs smaller batches than it
could, which costs more than the recomputes the door saves). Thrash, when it comes, shows as
the started programs outgrowing the budget: they park at their boundaries as above, and the
door stops filling slots for ``fill_cooldown_s`` after each such park (the workload's contexts
outgrow memory: the predictions are what keeps it from thrashing again).

Outgrowing the budget is counted, not yet thrash: the engine may still hold every counted
context (the budget is a share of memory, and a context's tail the program will rewrite costs
little to lose). So a started program is parked only on evidence (:meth:`~ProgramDoor.note_lost`):
since what the started programs hold last fit the budget, the engine lost a real part of a
context the door counted, found when its program's next call is queued, or when that call ran
with less of it cached than was there when it was queued (an engine that protects the contexts
kept through tool waits evicts the queued ones). Without evidence, parking would cost the
parked program its place and its context for a recompute nobody measured, and the cooldown
would switch work conservation off for the rest of a burst (measured on seed-mix, where the
counted contexts overran a 12K-token pool by a few hundred tokens: 30-58 parks in 60
programs, and the door cost 1.47x P50 against no door; with evidence, 9).

A program whose caller stops waiting (:meth:`~ProgramDoor.leave`: serve answers 503 with
Retry-After after its wait bound) keeps its place in line for ``place_kept_s``: the client's
retry queues where it was, not behind everyone who arrived since, so a long queue does not
turn into a lottery of retries. That holds for a newcomer and for a started program parked at
its boundary (:meth:`~ProgramDoor.come_back`); meanwhile it holds no one up.
"""

from __future__ import annotations

import heapq

from agentconsole.scheduler.doorline import (
    Fits,
    ReturningLine,
    RunEstimate,
    RunKey,
    WaitingLine,
)
from agentconsole.scheduler.fairness import FairnessConfig

#: how long a program that stopped waiting at the door keeps its place in line (a client
#: told to retry in seconds comes back well within it)
PLACE_KEPT_S = 300.0
#: after a started program is parked at a boundary (evidence that contexts outgrow memory),
#: the door admits by predictions alone this long (a long agent session lasts many minutes)
FILL_COOLDOWN_S = 600.0
#: the share of a counted context the engine must have lost to count as thrash: a placement
#: report a second old, or a page boundary, shows a few tokens missing; eviction takes whole
#: leaves of the radix tree (a context's tail and up)
LOSS_EVIDENCE_SHARE = 0.25
#: whether the door runs unless told otherwise: on (``serve``'s settings and its
#: ``ServerConfig`` default to this one value; a request-level policy gets no door anyway)
DOOR_ON_BY_DEFAULT = True


class ProgramDoor:
    """Admits programs while their counted private contexts fit ``budget_tokens``, or,
    while fewer than ``batch_slots`` of them have calls in the engine, while what they hold
    now leaves room (see the module docstring; 0: predictions alone).

    A program larger than the whole budget still starts when nothing else counts (it could
    never start otherwise). A disabled gate admits everything at once and counts nothing.
    ``fairness``: the tenants' weights and share slack the line shares admissions by (default:
    the guard's defaults, every tenant weighing 1).
    """

    def __init__(
        self,
        budget_tokens: int,
        *,
        enabled: bool = DOOR_ON_BY_DEFAULT,
        place_kept_s: float = PLACE_KEPT_S,
        batch_slots: int = 0,
        fill_cooldown_s: float = FILL_COOLDOWN_S,
        expected_run_s: RunEstimate | None = None,
        fairness: FairnessConfig | None = None,
    ) -> None:
        if budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
        self.budget_tokens = budget_tokens
        self.enabled = enabled
        self.place_kept_s = place_kept_s
        self.batch_slots = batch_slots
        self.fill_cooldown_s = fill_cooldown_s
        self._running: set[str] = set()  # started programs with calls in the engine
        self._no_fill_until = float("-inf")  # slots are not filled before (after thrash)
        self._share: dict[str, int] = {}  # started program -> private tokens it started with
        self._counted: set[str] = set()  # started programs in the working set
        self._version: dict[str, int] = {}  # bumped on every step out / rejoin
        self._expiry: list[tuple[float, int, str]] = []  # (until, version, program)
        #: a retention lapsed (stopped counting) outside a pass that starts the parked
        #: programs it may make room for: :attr:`wake_due` until the next such pass
        self._lapsed_unstarted = False
        #: per tenant, the predicted working set of its counted programs (``used_tokens``
        #: split by tenant; none at 0): its standing in the line (``doorline``)
        self._tenant_tokens: dict[str, int] = {}
        #: newcomers waiting, and the places of those that stopped waiting
        self._line = WaitingLine(
            expected_run_s, place_kept_s, tenant_tokens=self._tenant_tokens, fairness=fairness
        )
        self._started_at: dict[str, float] = {}  # started program -> when it first started
        #: per (tenant, kind), its started programs -> when they started, in the order they
        #: started: the first is the longest running (a floor on the line; serve's clock is
        #: the wall clock, so a step back would misorder a few of them). Per tenant: another
        #: tenant's programs labelled with a kind must not lengthen this tenant's expected run
        self._started_by_kind: dict[RunKey, dict[str, float]] = {}
        self._kind: dict[str, RunKey] = {}  # started program -> its (tenant, kind)
        #: started programs parked at a call boundary
        self._returning = ReturningLine(place_kept_s)
        self._held: dict[str, int] = {}  # started program -> private tokens it holds now
        self.used_tokens = 0  # predicted working set of the counted programs
        self.held_tokens = 0  # what the counted programs hold now
        #: the engine lost a counted context since the held tokens last fit the budget
        self._loss_seen = False
        #: started programs parked at a boundary whose parked call is not queued again yet:
        #: the context they (and their siblings meanwhile) find gone was dropped by plan
        self._dropped_by_plan: set[str] = set()
        self.parked_total = 0  # programs that ever had to wait
        self.boundary_parks = 0  # times a started program was parked at a call boundary

    # -- what the driver reports ---------------------------------------------------------------
    def try_start(
        self, program_id: str, private_tokens: int, now: float, kind: RunKey = ("", "")
    ) -> bool:
        """Start ``program_id`` (its expected run learned under ``kind``) now (True), or
        park it in line (False): it starts now only when nobody waiting goes before it."""
        if not self.enabled:
            return True
        self._expire(now)
        floor = self._running_s(kind, now) if self._line.expected_run_s else 0.0
        entry, returned = self._line.entry(program_id, private_tokens, kind, now, floor)
        # (where its arrival lets someone in line start, e.g. its tenant now waits too and
        # the shares change, that one starts at the door's next event: this answers for it)
        if (
            not self._returning.waiting(now)
            and self._line.next_start(now, self._fits(now), entry) is entry
        ):
            self._start(program_id, private_tokens, kind, now)
            return True
        self._line.add(entry)
        self.parked_total += not returned
        if len(self._line) > 1:  # its arrival may let another in line start (shares moved)
            self._lapsed_unstarted = True
        return False

    def leave(self, program_id: str, now: float) -> list[str]:
        """``program_id``'s caller stopped waiting at the door: it keeps its place for
        ``place_kept_s`` and holds no one up meanwhile. A newcomer leaves the queue
        (:meth:`try_start` queues it at its place again); a started program parked at a call
        boundary stays started, uncounted, and its retry comes back to its place
        (:meth:`come_back`). Returns the parked programs that start now."""
        if not self._line.leave(program_id, now):
            self._returning.step_away(program_id, now)
        return self._start_parked(now)

    def come_back(self, program_id: str, now: float) -> bool | None:
        """A call of ``program_id`` is at its boundary again. None: it was not away from
        its place among the returning programs (or that place lapsed: it is a started
        program like any other); True: it is first in line and fits, so it goes on now
        (counted); False: it waits at its place again."""
        self._expire(now)  # its turn and its room are judged on what counts now
        if not self._returning.back(program_id, now):
            return None
        waiting = self._returning.waiting(now)
        if waiting[0] != program_id or not self._admits(self._share[program_id], now):
            return False
        self._returning.remove(program_id)
        self._go_on(program_id)
        return True

    def step_out(self, program_id: str, until: float, now: float) -> list[str]:
        """``program_id`` waits on tools; its context counts until ``until`` (its retention;
        ``<= now`` when it was dropped). Returns the parked programs that start now."""
        if program_id not in self._share:
            return []
        self._running.discard(program_id)
        version = self._version[program_id] = self._version.get(program_id, 0) + 1
        if until > now:
            heapq.heappush(self._expiry, (until, version, program_id))
        else:
            self._uncount(program_id)
        return self._start_parked(now)

    def resize(self, program_id: str, predicted_tokens: int, current_tokens: int) -> None:
        """``program_id`` holds ``current_tokens`` now and is predicted to reach
        ``predicted_tokens`` (newcomers are admitted against the predictions; started
        programs are parked only when what they hold outgrows the budget, on evidence of
        thrash: :meth:`outgrown`)."""
        if program_id not in self._share:
            return
        if program_id in self._counted:
            self.used_tokens += predicted_tokens - self._share[program_id]
            self._add_tenant_tokens(program_id, predicted_tokens - self._share[program_id])
            self.held_tokens += current_tokens - self._held.get(program_id, 0)
            self._forget_loss_if_fits()
            if predicted_tokens < self._share[program_id]:
                self._lapsed_unstarted = True  # room freed: a waiting program may fit now
        self._share[program_id] = predicted_tokens
        self._held[program_id] = current_tokens

    def size_to(self, budget_tokens: int, batch_slots: int) -> None:
        """The engines' memory now takes ``budget_tokens`` of private contexts and their batch
        ``batch_slots`` requests (a change of memory can end an episode of thrash)."""
        if budget_tokens > self.budget_tokens or batch_slots > self.batch_slots:
            self._lapsed_unstarted = True  # more room: a waiting program may fit now
        self.budget_tokens = budget_tokens
        self.batch_slots = batch_slots
        self._forget_loss_if_fits()

    def note_lost(self, program_id: str, lost_tokens: int, now: float) -> None:
        """The engine no longer held ``lost_tokens`` of ``program_id``'s context (found as
        its next call was queued, or as that call ran). Where the door counted that context
        (kept through a tool wait whose retention has not lapsed, or in the engine) and the
        loss is a real part of it, that is thrash: the evidence :meth:`outgrown` needs,
        until what the started programs hold fits again. A context the door itself had
        dropped (:meth:`park_started`) is no evidence."""
        self._expire(now)
        if program_id in self._dropped_by_plan:
            # a fan-out sibling queued while the program waits to go on finds the same
            # dropped context: the first call queued after it went on ends what was planned
            if program_id not in self._returning:
                self._dropped_by_plan.discard(program_id)
            return
        held = self._held.get(program_id, 0)
        if (
            program_id in self._counted
            and lost_tokens > 0
            and lost_tokens >= held * LOSS_EVIDENCE_SHARE
        ):
            self._loss_seen = True

    def outgrown(self, now: float) -> bool:
        """What the started programs hold at ``now`` no longer fits and the engine has lost
        a counted context over it: they outgrew memory (see the module docstring). Retentions
        lapsed by ``now`` stop counting first: a count that lapsed while no event woke the
        door must not park a program (its context moved, the slots unfilled for
        ``fill_cooldown_s``) for memory nobody holds."""
        self._expire(now)
        return (
            self.enabled
            and self._loss_seen
            and self.held_tokens > self.budget_tokens
            and len(self._counted) > 1
        )

    def park_started(self, program_id: str, now: float) -> None:
        """Park started program ``program_id`` at its call boundary: it stops counting and
        waits, ahead of newcomers, until its working set fits again; no slot is filled past
        the predictions for ``fill_cooldown_s``."""
        if program_id in self._share and program_id not in self._returning:
            self._no_fill_until = now + self.fill_cooldown_s
            self._uncount(program_id)
            self._running.discard(program_id)
            self._version[program_id] = self._version.get(program_id, 0) + 1
            self._returning.park(program_id)
            self._dropped_by_plan.add(program_id)
            self.boundary_parks += 1

    def holds_place(self, program_id: str, now: float) -> bool:
        """``program_id`` waits at the door, or stopped waiting and keeps its place."""
        return self._line.holds_place(program_id, now) or program_id in self._returning

    def is_returning(self, program_id: str) -> bool:
        """``program_id`` was parked at a call boundary and waits to go on."""
        return self._returning.is_waiting(program_id)

    def rejoin(self, program_id: str) -> None:
        """``program_id`` has a call again: it counts from now on (no door for it)."""
        if program_id in self._share:
            self._returning.let_through_if_away(program_id)
            self._version[program_id] = self._version.get(program_id, 0) + 1
            self._go_on(program_id)

    def finish(self, program_id: str, now: float) -> list[str]:
        """``program_id`` ended (or was cancelled, at the door or not): it no longer counts;
        returns the parked programs that start now, in the order they go."""
        if program_id in self._share:
            self._uncount(program_id)
            self._running.discard(program_id)
            del self._share[program_id]
            self._held.pop(program_id, None)
            self._version.pop(program_id, None)
            self._dropped_by_plan.discard(program_id)
            kind = self._kind.pop(program_id, ("", ""))
            started = self._started_by_kind.get(kind)
            if started is not None:
                started.pop(program_id, None)
                if not started:
                    del self._started_by_kind[kind]
            self._started_at.pop(program_id, None)
            self._returning.remove(program_id)
        else:
            self._line.forget(program_id)
        return self._start_parked(now)

    def let_in(self, program_id: str, tokens: int, now: float, *, kind: RunKey) -> None:
        """``program_id`` starts without the door's check (the door is off: a request-level
        policy), counted as started, so a door that comes back knows what runs."""
        if program_id not in self._share:
            self._start(program_id, tokens, kind, now)

    def let_all_in(self, now: float) -> list[str]:
        """The door is off (a request-level policy): every program waiting at it goes on now,
        counted as started whatever it holds, so none is started a second time if the door
        comes back. Returns them."""
        started = self._returning.clear()
        for pid in started:
            self._go_on(pid)
        while (first := self._line.first(now)) is not None:
            self._line.take(first.program_id)
            self._start(first.program_id, first.tokens, first.kind, now)
            started.append(first.program_id)
        return started

    def wake(self, now: float) -> list[str]:
        """Time passed: retentions that lapsed stop counting; returns programs that start."""
        return self._start_parked(now)

    # -- what the driver reads ---------------------------------------------------------------
    def is_started(self, program_id: str) -> bool:
        """``program_id`` passed the door (and has not finished)."""
        return program_id in self._share

    def is_parked(self, program_id: str) -> bool:
        """``program_id`` waits at the door."""
        return program_id in self._line

    def started_at(self, program_id: str) -> float | None:
        """When started program ``program_id`` passed the door (None: it has not)."""
        return self._started_at.get(program_id)

    @property
    def wake_due(self) -> bool:
        """Room may have freed where nothing started the programs waiting (a retention
        lapsed in a newcomer's own check, a loss's, a boundary's; a newcomer queued and
        changed the tenants' shares; a prediction shrank; the budget grew): :meth:`wake`
        may start some now, and no lapse left in :meth:`next_expiry` says so."""
        return self._lapsed_unstarted and (len(self._line) > 0 or len(self._returning) > 0)

    def next_expiry(self) -> float | None:
        """When the earliest retention still counted lapses (a wake-up worth scheduling while
        programs are parked), or None."""
        waiting = len(self._line) or self._returning
        return self._expiry[0][0] if self._expiry and waiting else None

    @property
    def parked(self) -> int:
        """Programs waiting to start or to go on."""
        return len(self._line) + len(self._returning) - self._returning.away

    @property
    def shortest_first(self) -> bool:
        """The line goes by response ratio of each kind's expected run (else by arrival)."""
        return self._line.expected_run_s is not None

    @property
    def parked_tokens(self) -> int:
        """Private tokens the programs at the door will claim (demand the engines do not see)."""
        return self._line.tokens

    # -- counting --------------------------------------------------------------------------------
    def _start_parked(self, now: float) -> list[str]:
        self._expire(now)
        self._lapsed_unstarted = False
        started: list[str] = []
        # programs parked at a call boundary go on first: their context is half-built. In
        # line order among those that need room (the first that does not fit holds up the
        # rest and every newcomer); one a fan-out sibling's call counted again meanwhile
        # takes no more room than it has, so it goes on whoever waits ahead of it
        blocked = False
        for pid in self._returning.waiting(now):
            if pid not in self._counted and (blocked or not self._admits(self._share[pid], now)):
                blocked = True
                continue
            self._returning.remove(pid)
            self._go_on(pid)
            started.append(pid)
        if blocked:
            return started
        fits = self._fits(now)
        while (first := self._line.next_start(now, fits)) is not None:
            self._line.take(first.program_id)
            self._start(first.program_id, first.tokens, first.kind, now)
            started.append(first.program_id)
        return started

    def _fits(self, now: float) -> Fits:
        """Whether a newcomer of so many predicted tokens may start now (as it stands)."""
        return lambda tokens: self._admits(tokens, now)

    def _running_s(self, kind: RunKey, now: float) -> float:
        """How long the longest running started program of ``kind`` (its tenant's) has run."""
        started = self._started_by_kind.get(kind)
        return now - next(iter(started.values())) if started else 0.0

    def _start(self, program_id: str, tokens: int, kind: RunKey, now: float) -> None:
        self._share[program_id] = tokens
        self._started_at[program_id] = now
        self._started_by_kind.setdefault(kind, {})[program_id] = now
        self._kind[program_id] = kind
        self._go_on(program_id)

    def _expire(self, now: float) -> None:
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            _, version, pid = heapq.heappop(expiry)
            if self._version.get(pid) == version:  # not rejoined or stepped out again since
                self._uncount(pid)
                self._lapsed_unstarted = True

    def _admits(self, tokens: int, now: float) -> bool:
        """A program predicted to reach ``tokens`` may start (or go on) now."""
        if not self._counted or self.used_tokens + tokens <= self.budget_tokens:
            return True
        # work-conserving: a slot would idle; what is held now (not predicted) must leave room
        slot_free = len(self._running) < self.batch_slots and now >= self._no_fill_until
        return slot_free and self.held_tokens + tokens <= self.budget_tokens

    def _go_on(self, program_id: str) -> None:
        """``program_id`` counts and has a call in the engine."""
        self._count(program_id)
        self._running.add(program_id)

    def _count(self, program_id: str) -> None:
        if program_id not in self._counted:
            self._counted.add(program_id)
            self.used_tokens += self._share[program_id]
            self._add_tenant_tokens(program_id, self._share[program_id])
            self.held_tokens += self._held.setdefault(program_id, self._share[program_id])

    def _uncount(self, program_id: str) -> None:
        if program_id in self._counted:
            self._counted.discard(program_id)
            self.used_tokens -= self._share[program_id]
            self._add_tenant_tokens(program_id, -self._share[program_id])
            self.held_tokens -= self._held.get(program_id, 0)
            self._forget_loss_if_fits()

    def _add_tenant_tokens(self, program_id: str, tokens: int) -> None:
        """``program_id``'s tenant's counted programs are predicted to hold ``tokens`` more."""
        tenant = self._kind.get(program_id, ("", ""))[0]
        held = self._tenant_tokens.get(tenant, 0) + tokens
        if held:
            self._tenant_tokens[tenant] = held
        else:
            self._tenant_tokens.pop(tenant, None)

    def _forget_loss_if_fits(self) -> None:
        """Evidence of thrash holds for one episode of over-commitment: once what is held
        fits again, the next episode needs evidence of its own."""
        if self.held_tokens <= self.budget_tokens:
            self._loss_seen = False
