"""The program driver: every program-level decision, the same for ``bench`` and ``serve``.

The :class:`ProgramController` keeps the books (programs, nodes, estimates, tickets); the
driver decides what a program's events mean for the engine and for other programs:

* **the door** (``scheduler.door.ProgramDoor``): is a new program started now or parked,
  sized by its kind's predicted peak against the engines' HBM + DRAM less the shared
  prefixes' room (``scheduler.doorroom``), and which waiting program goes first (its
  kind's expected run: ``scheduler.doorline``); each wait there ends in a
  ``program.door_waited`` event, which the metrics count as queueing;
* **ticket inputs**: the cached tokens and restore cost of a call, from what the engine holds
  of its prompt (a :class:`~agentconsole.scheduler.runtime.PrefixProbe`);
* **the tool-wait decision**: when a program waits on tools only, what happens to its KV
  (asked of a :class:`~agentconsole.scheduler.actions.KvAdvisor`, from one
  :class:`~agentconsole.scheduler.runtime.MemoryView` and the slowest pending tool's learned
  latency, less what of it has run already), and how long the program then counts at the door;
* **what a call's end, a tool's start and end, a finish and a cancel do** (a program's end
  also tells the carrier to drop where its calls were placed:
  :class:`~agentconsole.scheduler.actions.ProgramEnded`).

It is clock-free and knows no runtime, in the spirit of vLLM v1's scheduler interface: a
carrier feeds it events and carries out the :data:`~agentconsole.scheduler.actions.Action`
values it returns (``scheduler/actions.py``). ``Simulation`` carries them out in virtual
time, ``ProgramService`` with asyncio; the parity test feeds both one event script. Decisions
that depend on several simultaneous events (a call ends and reveals three tools at once) wait
for :meth:`ProgramDriver.settle`, which a carrier calls once the events of one instant are in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from agentconsole.scheduler import learned
from agentconsole.scheduler.actions import (
    AbortCalls,
    Action,
    CacheHint,
    CostView,
    EngineView,
    KvAdvisor,
    ProgramEnded,
    Retained,
    StartPrograms,
    StopProgram,
    ToolWaitFacts,
)
from agentconsole.scheduler.controller import CallUsage, ProgramController, QuotaExceeded
from agentconsole.scheduler.door import ProgramDoor
from agentconsole.scheduler.doorroom import (
    DOOR_MEMORY_SHARE,
    DoorBudget,
    SharedPrefix,
    door_size,
    marks_public,
    shared_reserve,
)
from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind, Scalar
from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.growth import KindKey, PeakEstimator, RunTimes, kind_key
from agentconsole.scheduler.latency import LatencyDistribution, remaining
from agentconsole.scheduler.program import Node
from agentconsole.scheduler.runtime import CacheAction, HeldSegment, PrefixProbe
from agentconsole.scheduler.ticket import CallTicket

#: a program with no call in flight and no tool running counts at the door this long (an
#: agent's next call or tool usually follows at once; one that never says it is done must
#: not hold the door shut)
IDLE_GRACE_S = 5.0


class SettleFailed(Exception):
    """A decision of :meth:`ProgramDriver.settle` raised ``cause``: ``actions`` are those
    decided before it, still to be carried out; ``program_id`` is the program whose decision
    failed. The programs after it are decided at the next settle."""

    def __init__(self, program_id: str, actions: list[Action], cause: Exception) -> None:
        super().__init__(f"the decision for program {program_id!r} failed: {cause!r}")
        self.program_id = program_id
        self.actions = actions
        # set here: the compiled build does not keep a ``raise ... from``'s cause
        self.__cause__ = cause


@dataclass(slots=True)
class _Flight:
    """What of a program is in the engine or out at a tool right now."""

    #: call ids in flight -> the prompt tokens the engine held when each was queued (a call
    #: served fewer from cache lost the rest while it waited: evidence of thrash for the door)
    calls: dict[str, int] = field(default_factory=dict)
    tools: set[str] = field(default_factory=set)  # tool nodes running
    #: when the present wait was expected to end when it was decided (None: not decided);
    #: a tool whose expected end is later extends the wait and is decided again
    decided_until: float | None = None
    #: private tokens of its context now (its last call's prompt plus answer), and the most
    #: it held so far: what the door sizes it by and what its kind's growth learns from
    private_tokens: int = 0
    peak_tokens: int = 0
    #: what the engine held of its first call's prompt (probed when it was queued, or as the
    #: engine reported it cached when it ended): computed by other programs (a platform or
    #: tenant prefix), stored once for all of them, never its own. Learned only where the
    #: carrier marks nothing public (``serve``); one that does (the simulator's traces) has
    #: said what is shared, and a tenant's own prefix counts, conservatively
    shared_tokens: int | None = None
    learns_shared: bool = False
    #: that prefix in the probe's named segments (empty: the runtime names none)
    shared_segments: tuple[HeldSegment, ...] = ()
    #: calls of it that ended (completed or not): one that ended without completing is no
    #: longer a first call still to come
    ended_calls: int = 0


# -- the driver ------------------------------------------------------------------------------------
class ProgramDriver:
    """See the module docstring. ``program_aware`` is the active policy's flag: request-level
    policies get no door and no tool-wait decisions (stock behaviour, honest baselines)."""

    def __init__(
        self,
        controller: ProgramController,
        advisor: KvAdvisor,
        cost: CostView,
        *,
        program_aware: bool = True,
        admission: bool = True,
        memory_share: float = DOOR_MEMORY_SHARE,
        budget_tokens: int | None = None,
        idle_grace_s: float = IDLE_GRACE_S,
        shortest_first: bool = True,
        fairness: FairnessConfig | None = None,
    ) -> None:
        self.controller = controller
        self.advisor = advisor
        self.cost = cost
        self.program_aware = program_aware
        #: what the door may fill: the operator's budget or a share of the reported memory
        self.budget = DoorBudget(memory_share, budget_tokens)
        self.idle_grace_s = idle_grace_s
        #: peak working sets per (tenant, kind) of program: how the door sizes a program
        self.growth = PeakEstimator()
        #: seconds from start to finish per (tenant, kind) of program: the door's line order
        #: (with ``shortest_first``; else first come first served)
        self.run_times = RunTimes()
        self.door = ProgramDoor(
            budget_tokens or 0,
            enabled=admission,
            expected_run_s=self.run_times.expected if shortest_first else None,
            # the tenants' weights, as the engines' guard shares service by them
            fairness=fairness,
        )
        self.retained: dict[str, Retained] = {}
        self._flights: dict[str, _Flight] = {}
        #: programs that learn their shared prefix at their first call (an ordered set): the
        #: door's reserve reads these alone, not every flight at each arrival and end
        self._learners: dict[str, None] = {}
        #: programs waiting at the door -> since when, and whether at a call boundary (else
        #: at their start): the wait the metrics count as queueing (``_door_wait_ended``)
        self._door_waits: dict[str, tuple[float, bool]] = {}
        self._dirty: dict[str, None] = {}  # an ordered set: decisions in event order

    # -- the door
    @property
    def door_open(self) -> bool:
        """New programs may have to wait (admission on under a program-aware policy)."""
        return self.door.enabled and self.program_aware

    def arrive(
        self,
        program_id: str,
        private_tokens: int,
        memory_tokens: int,
        now: float,
        *,
        held: PrefixProbe | None = None,
        batch_slots: int = 0,
    ) -> bool:
        """A new program's first work is here; True when it starts now, False when it is
        parked (a later :class:`StartPrograms` starts it). ``private_tokens``: its first
        prompt's non-public tokens; ``held``: what the engine holds of that prompt (None:
        nothing known), so the program is sized by what it does not share
        (:func:`door_size`); ``memory_tokens``: the engines' HBM + DRAM now; ``batch_slots``:
        the requests they run at once (0: unknown; the door then admits by predicted working
        sets alone)."""
        if self.door.is_started(program_id):
            return True
        if not self.door_open:
            if self.door.enabled:  # off under this policy: a door back later knows it runs
                size = door_size(private_tokens, held)
                flight = self._flight(program_id)
                flight.private_tokens = flight.peak_tokens = size
                self.door.let_in(program_id, size, now, kind=self._kind(program_id))
            return True
        if self.budget.operator_tokens is None and memory_tokens <= 0:
            return True  # a runtime that reports no KV memory has no door
        if self.door.is_parked(program_id):
            return False
        self.budget.report(memory_tokens, batch_slots)
        self._size_door()
        size = door_size(private_tokens, held)
        flight = self._flight(program_id)
        flight.private_tokens = flight.peak_tokens = size
        predicted = self._predicted(program_id, size)
        started = self.door.try_start(program_id, predicted, now, kind=self._kind(program_id))
        if not started:
            self._door_wait_starts(program_id, now, boundary=False)
        return started

    def at_boundary(self, program_id: str, view: EngineView, now: float) -> list[Action] | None:
        """A started program's next call is ready: None to queue it, or, when the started
        programs have outgrown memory, the actions that park the program here (its context
        offloaded when host memory can take it, else dropped); a later
        :class:`StartPrograms` lets it go on. A program whose caller stopped waiting here
        comes back to its place in line (no actions: it waits again, its context already
        moved), or goes on when its turn came meanwhile."""
        door = self.door
        back = door.come_back(program_id, now) if self.door_open else None
        if back is not None:  # it stopped waiting here before: back to its place in line
            if not back:
                self._door_wait_starts(program_id, now, boundary=True)
            return None if back else []
        if not (self.door_open and door.is_started(program_id) and door.outgrown(now)):
            return None
        if self.in_flight(program_id) or door.is_returning(program_id):
            return None  # a fan-out's sibling runs: it parks at a boundary of its own
        door.park_started(program_id, now)
        self._door_wait_starts(program_id, now, boundary=True)
        memory = view.memory(program_id, now)
        flight = self._flight(program_id)
        room = memory.dram_capacity_tokens >= flight.private_tokens > 0
        action = CacheAction.OFFLOAD if room else CacheAction.RECOMPUTE
        self._release(program_id)
        return [CacheHint(program_id, action, 0.0)]

    def leave_door(self, program_id: str, now: float) -> list[Action]:
        """``program_id``'s caller stopped waiting at the door (``ProgramDoor.leave``: its
        place in line is kept for its retry; its wait so far is recorded, a retry that
        waits again starts another). One the door had just let in (started, not parked at a
        boundary) goes on with no call: its share is held only for the idle grace, as a
        refused call's (:meth:`call_refused`)."""
        self._door_wait_ended(program_id, now, "left")
        door = self.door
        if door.is_started(program_id) and not door.is_returning(program_id):
            self.call_refused(program_id)
        return self._started(door.leave(program_id, now), now)

    def let_all_in(self, now: float) -> list[Action]:
        """The door turned off (``program_aware`` false): start everyone waiting at it."""
        return self._started(self.door.let_all_in(now), now)

    def tick(self, now: float) -> list[Action]:
        """Time passed: retentions that lapsed stop counting at the door."""
        return self._started(self.door.wake(now), now)

    def next_wake(self) -> float | None:
        """When a retention counted at the door lapses while programs wait (None: never)."""
        return self.door.next_expiry()

    # -- LLM calls ---------------------------------------------------------------------------------
    def queue_call(
        self,
        program_id: str,
        node_id: str,
        probe: PrefixProbe,
        now: float,
        *,
        private_tokens: int | None = None,
        queued_behind: int = 0,
        max_output_tokens: int | None = None,
    ) -> CallTicket:
        """The ticket of a call about to be queued, its cache inputs from ``probe``; the
        program counts at the door again, sized by its context's ``private_tokens`` (default:
        the whole prompt) less the prefix it shares with other programs, and its kind's
        growth. ``queued_behind``: the calls the engines run while others wait in their queue
        (0: none waits; the policies' tail term needs it: ``ProgramController.ticket``);
        ``max_output_tokens``: the call's ``max_tokens``, which caps its expected output
        (None: not known)."""
        restore = self.cost.reload_seconds(probe.slow_tokens)
        if probe.lost_tokens:
            restore += self.cost.prefill_seconds(probe.lost_tokens, probe.hit_tokens)
        ticket = self.controller.ticket(
            program_id,
            node_id,
            now,
            prompt_tokens=probe.prompt_tokens,
            cached_tokens=probe.hit_tokens,
            restore_cost_s=restore,
            queued_behind=queued_behind,
            max_output_tokens=max_output_tokens,
        )
        flight = self._flight(program_id)
        self.door.note_lost(program_id, probe.lost_tokens, now)  # before it counts again: rejoin
        flight.calls[ticket.call_id] = probe.hit_tokens
        flight.decided_until = None
        if flight.shared_tokens is None:  # its first call: every hit is another program's KV
            flight.learns_shared = not marks_public(private_tokens, probe.prompt_tokens)
            flight.shared_tokens = probe.hit_tokens if flight.learns_shared else 0
            if flight.learns_shared:
                flight.shared_segments = probe.held_segments
                self._learners[program_id] = None
            if flight.shared_tokens:
                self._resize_door()  # its prefix takes room from now, not the next arrival
        own = max(probe.prompt_tokens - flight.shared_tokens, 0)
        self._grow(program_id, flight, own if private_tokens is None else min(private_tokens, own))
        self.door.rejoin(program_id)
        self._release(program_id)
        return ticket

    def call_refused(self, program_id: str) -> None:
        """A call of ``program_id`` was refused after the door let it pass (a tenant limit):
        like a first call that failed, it keeps the program's share at the door only for the
        idle grace (the next ``settle``), not until the program idles out."""
        flight = self._flights.get(program_id)
        if flight is not None:
            flight.ended_calls += 1
            self._dirty[program_id] = None

    def withdraw(self, program_id: str, call_id: str) -> None:
        """A queued call never reached the engine (the runtime refused it): forget it, and
        the program keeps its door share only for the idle grace (as :meth:`call_refused`),
        not until it idles out: with nothing of it in flight it held the door's room while
        newcomers waited."""
        flight = self._flights.get(program_id)
        if flight is not None:
            flight.calls.pop(call_id, None)
            self.call_refused(program_id)

    def call_ended(
        self,
        program_id: str,
        node_id: str,
        call_id: str,
        now: float,
        usage: CallUsage | None,
        *,
        outcome: str = "ok",
    ) -> list[Action]:
        """The engine is done with ``call_id``. ``outcome`` ``ok``: its node completes with
        ``usage`` and its children become ready. Otherwise (``aborted``, ``failed``) the node
        closes and the program goes on; what the call cost before it ended (``usage``, when
        the runtime reported it) is still charged to the program. A token quota overrun
        stops the program."""
        flight = self._flights.get(program_id)
        held_when_queued = flight.calls.pop(call_id, None) if flight is not None else None
        if flight is not None:
            flight.ended_calls += 1
        if held_when_queued is not None and usage is not None and outcome == "ok":
            # evicted while it waited in the engine's queue (where thrash shows on an engine
            # that protects the contexts the tool-wait decisions keep); an aborted call
            # reports nothing cached, which says nothing of memory
            self.door.note_lost(program_id, held_when_queued - usage.cached_tokens, now)
        self._dirty[program_id] = None
        program = self.controller.programs.get(program_id)
        node = program.nodes.get(node_id) if program is not None else None
        if program is None or node is None:
            return []
        if flight is not None and usage is not None:  # its answer joins its context
            own = flight.private_tokens
            if flight.learns_shared and not program.completed_calls:  # all cached: another's
                learned_more = self._learn_shared(flight, usage.cached_tokens)
                own -= learned_more
                if learned_more:
                    self._resize_door()
            self._grow(program_id, flight, own + usage.output_tokens)
        try:
            if outcome == "ok" and node.in_flight and usage is not None:
                self.controller.finish_llm(program_id, node_id, now, usage)
                return []
            if usage is not None:  # a cancelled program pays for what it streamed too
                self.controller.charge(program_id, node_id, usage)
        except QuotaExceeded as over:
            if program.state.terminal:
                return []
            return [StopProgram(program_id, over.quota, over.limit, over.value)]
        finally:
            if outcome != "ok" and node.in_flight:
                self.controller.close_node(program_id, node_id, now, outcome)
        return []

    # -- tools
    def tool_started(self, program_id: str, node_id: str, now: float) -> Node:
        """A tool began running (its attempt opens); decided at the next :meth:`settle`."""
        node = self.controller.start_node(program_id, node_id, now)
        self._flight(program_id).tools.add(node_id)
        self._dirty[program_id] = None
        return node

    def tool_finished(
        self,
        program_id: str,
        node_id: str,
        now: float,
        *,
        outcome: str,
        latency_s: float,
        final: bool,
        result_bytes: int = 0,
    ) -> bool:
        """A tool attempt ended; returns True when it is retried (see
        ``ProgramController.finish_tool``). The program's KV hold ends with its last tool."""
        _, retry = self.controller.finish_tool(
            program_id,
            node_id,
            now,
            outcome=outcome,
            latency_s=latency_s,
            final=final,
            result_bytes=result_bytes,
        )
        flight = self._flights.get(program_id)
        if flight is not None:
            flight.tools.discard(node_id)
            if not flight.tools:
                self._release(program_id)
        return retry

    def nodes_cancelled(self, program_id: str, node_ids: Iterable[str]) -> None:
        """Nodes of a running program were cancelled (a node cancel): their tools hold the
        program in no tool wait any more (its calls leave with their aborts' ``call_ended``),
        and its wait is decided again at the next :meth:`settle` from the tools still running
        (the wait decided may have been a cancelled tool's, due back after theirs)."""
        flight = self._flights.get(program_id)
        if flight is not None:
            flight.decided_until = None
            self._leave_tool_wait(program_id, flight, node_ids)

    def no_longer_waits_on(self, program_id: str, node_id: str) -> None:
        """The program waits on the tool of ``node_id`` no more, though it did not end: its
        start failed before anything of it ran (the node's next attempt is a retry's). Its
        tool wait is decided again at the next :meth:`settle`, from the tools still running
        (the wait decided may have been this tool's, or its decision may have failed
        half-way); with none running, the program counts at the door only for the idle
        grace."""
        flight = self._flights.get(program_id)
        if flight is not None:
            flight.decided_until = None
            self._leave_tool_wait(program_id, flight, (node_id,))

    def _leave_tool_wait(self, program_id: str, flight: _Flight, node_ids: Iterable[str]) -> None:
        """The tools of ``node_ids`` hold ``program_id`` in no tool wait any more: its KV hold
        ends with the last of them, and what it waits on is decided at the next
        :meth:`settle`."""
        flight.tools.difference_update(node_ids)
        if not flight.tools:
            self._release(program_id)
        self._dirty[program_id] = None

    # -- ends
    def finish(
        self,
        program_id: str,
        now: float,
        *,
        success: bool = True,
        last_active: float | None = None,
    ) -> list[Action]:
        """The program is done (the agent said so, or the carrier knows it); its peak working
        set teaches its kind's growth, and its run from the door to ``last_active`` (when its
        last work ended; default ``now``: an idle finish comes long after it) its kind's
        expected run; its E2E ends at ``last_active`` too."""
        flight = self._flights.get(program_id)
        program = self.controller.get(program_id)
        if not program.state.terminal:  # it ends at the door: its wait there ends before it
            self._door_wait_ended(program_id, now, "ended")
        key = kind_key(program.labels, program.tenant)
        # the event's tenant is the other half of the key: a restart relearns it per tenant
        taught: dict[str, Scalar] = {learned.KIND: key[1]}
        # a program that ran no call (finished at the door) says nothing of its kind's peak
        if success and flight is not None and program.completed_calls:
            self.growth.observe(key, flight.peak_tokens)
            taught[learned.PEAK_TOKENS] = flight.peak_tokens
        started = self.door.started_at(program_id)
        ended = now if last_active is None else min(last_active, now)
        # a program that ran no call teaches no run: finishing empty programs under a label
        # would train the tenant's expected run short and put its long ones first in line
        if success and started is not None and program.completed_calls:
            self.run_times.observe(key, ended - started)
            taught[learned.RUN_S] = ended - started
        self.controller.finish_program(
            program_id, now, success=success, taught=taught, ended_at=ended
        )
        return self._end(program_id, now)

    def relearn(self, events: Iterable[Event]) -> int:
        """Learn again what earlier events taught (what a previous run of the server stored,
        oldest first; see :mod:`~agentconsole.scheduler.learned`): each label's calls, each
        kind's peak and run (under the event's tenant, as live), each tool's latency. Changes
        the learners only; returns how many events it replayed."""
        replayed = 0
        for event in events:
            if event.kind not in learned.RELEARNED_KINDS:
                continue
            replayed += 1
            self.controller.relearn(event)
            kind = event.data.get(learned.KIND)
            if event.kind is not EventKind.PROGRAM_FINISHED or not isinstance(kind, str):
                continue  # a tool's end, a failure, or a finish stored before they had a kind
            key = event.tenant, kind
            self.growth.observe(key, number(event.data, learned.PEAK_TOKENS))
            self.run_times.observe(key, number(event.data, learned.RUN_S))
        return replayed

    def cancel(self, program_id: str, now: float, *, reason: str = "user") -> list[Action]:
        """Cancel the program: its calls in flight are aborted and, under a program-aware
        policy, its KV freed; parked programs may start. Returns nothing the second time."""
        if self.controller.programs[program_id].state.terminal:
            return self._end(program_id, now)
        flight = self._flights.get(program_id)
        calls = tuple(sorted(flight.calls)) if flight is not None else ()
        self._door_wait_ended(program_id, now, "ended")  # recorded before its end
        self.controller.cancel_program(program_id, now, reason=reason)
        actions: list[Action] = [AbortCalls(calls)] if calls else []
        if self.program_aware:
            actions.append(CacheHint(program_id, CacheAction.RECOMPUTE, 0.0))
        return actions + self._end(program_id, now)

    def forget(self, program_id: str, now: float) -> list[Action]:
        """The carrier dropped the program from memory: nothing of it counts any more."""
        return self._end(program_id, now)

    # -- deciding
    def settle(self, view: EngineView, now: float) -> list[Action]:
        """Decide for the programs whose events came in since the last call: a program that
        now waits on tools only gets a tool-wait decision (see :meth:`_tool_wait`), one with
        nothing in flight counts at the door only for the idle grace. A decision that raises
        ends it in :class:`SettleFailed`, which carries the actions decided before it.
        Programs a retention's lapse let start, found where nothing started them (a
        newcomer's check at the door, say), start first."""
        door = self.door
        actions: list[Action] = self._started(door.wake(now), now) if door.wake_due else []
        if not self._dirty:
            return actions
        dirty, self._dirty = list(self._dirty), {}
        for i, program_id in enumerate(dirty):
            try:
                actions += self._settle_one(program_id, view, now)
            except Exception as failure:
                # what was decided still has to be carried out (a start skipped would leave
                # programs at the door), and the programs after this one are decided next
                # time; the failed one is not retried, or it would fail first every time, and
                # it holds its door share only for the idle grace, as a program with nothing
                # decided (else it stayed counted for its whole tool wait, nothing to wake
                # the door for the programs waiting there)
                self._dirty = {**dict.fromkeys(dirty[i + 1 :]), **self._dirty}
                with contextlib.suppress(Exception):  # the decision's failure is the one told
                    grace = now + self.idle_grace_s
                    actions += self._started(self.door.step_out(program_id, grace, now), now)
                raise SettleFailed(program_id, actions, failure) from failure
        return actions

    def _settle_one(self, program_id: str, view: EngineView, now: float) -> list[Action]:
        """:meth:`settle`'s decision for one program whose events came in."""
        program = self.controller.programs.get(program_id)
        flight = self._flights.get(program_id)
        if program is None or program.state.terminal or flight is None or flight.calls:
            return []
        if not (program.completed_calls or flight.ended_calls):
            return []  # its first call is still to come: it counts as admitted, for it
        grace = now + self.idle_grace_s
        if flight.tools and self.program_aware:
            return self._tool_wait(program_id, flight, view, now)
        # nothing decided of its wait (none under a request-level policy, the door off: a
        # door back later must not count it through its tools as running), or no tools
        return self._started(self.door.step_out(program_id, grace, now), now)

    def _tool_wait(
        self, program_id: str, flight: _Flight, view: EngineView, now: float
    ) -> list[Action]:
        """Decide the wait on the running tool expected back last, unless that was done
        already: tools started together are decided once, one that starts later is decided
        again only when it is expected back after the wait decided for."""
        latency, started, until = self._last_tool_back(program_id, flight)
        if flight.decided_until is not None and until <= flight.decided_until:
            return []
        # the tool has run since ``started`` (the call that ends with the tool wait may have
        # outlasted it): decide on what is left of its wait, so a retention ends near when
        # it is due back, not a whole latency after the decision
        latency = remaining(latency, now - started)
        flight.decided_until = until
        context = view.context(program_id, now)
        if context is None or context.private_tokens <= 0:
            # nothing of it is cached: it has no working set until its next call
            return self._started(self.door.step_out(program_id, now, now), now)
        private = context.private_tokens
        facts = ToolWaitFacts(
            program_id,
            private,
            context.shared_tokens,
            latency,
            self.cost.prefill_seconds(private),
            self.door.parked_tokens,
        )
        advice = self.advisor.advise(facts, view.memory(program_id, now), now)
        program = self.controller.programs[program_id]
        self.controller.sink.emit(
            Event(now, EventKind.KV_DECISION, program_id, tenant=program.tenant, data=advice.data)
        )
        if advice.action is not CacheAction.RECOMPUTE:
            self.retained[program_id] = Retained(
                program_id, program.tenant, private, advice.action, now + advice.retain_s
            )
        hint = CacheHint(program_id, advice.action, advice.retain_s)
        kept = now + advice.kept_s
        return [hint, *self._started(self.door.step_out(program_id, kept, now), now)]

    def _last_tool_back(
        self, program_id: str, flight: _Flight
    ) -> tuple[LatencyDistribution, float, float]:
        """The running tool expected back last (by its learned mean latency from its start):
        its latency, when it started, and when it is expected back."""
        program = self.controller.programs[program_id]
        best: tuple[LatencyDistribution, float, float] | None = None
        for node_id in sorted(flight.tools):
            node = program.nodes[node_id]
            if node.tool is None or not node.attempts:
                continue
            tool = node.tool
            dist = self.controller.tool_distribution(program.tenant, tool.name, str(tool.kind))
            started = node.attempts[-1].started_at
            back = started + dist.mean()
            if best is None or back > best[2]:
                best = (dist, started, back)
        assert best is not None, "a tool wait without a tool"
        return best

    # -- growth
    def _kind(self, program_id: str) -> KindKey:
        """What a program's peak and run are learned under: its tenant and kind."""
        program = self.controller.get(program_id)
        return kind_key(program.labels, program.tenant)

    @staticmethod
    def _learn_shared(flight: _Flight, cached_tokens: int) -> int:
        """The engine served ``cached_tokens`` of the program's first call from cache (a
        runtime whose probe sees only the program's own context learns the shared prefix
        here); returns how many more tokens that is than was known, taking them off the
        program's peak too (they were never its own)."""
        more = max(cached_tokens - (flight.shared_tokens or 0), 0)
        flight.shared_tokens = max(flight.shared_tokens or 0, cached_tokens)
        flight.peak_tokens = max(flight.peak_tokens - more, 0)
        return more

    @property
    def reserved_tokens(self) -> int:
        """The room the started programs' shared prefixes take now
        (:func:`~agentconsole.scheduler.doorroom.shared_reserve`), which the door's budget
        keeps (:meth:`_resize_door` at each change of them); 0 with the door off, and under
        an operator's budget (taken as given)."""
        if not self.door_open or not self.budget.reserves:
            return 0
        return shared_reserve(self._shared_prefixes())

    def _shared_prefixes(self) -> Iterator[SharedPrefix]:
        """The prefixes the started programs found cached at their first calls, learned where
        the carrier marks nothing public (serve): other programs' KV, in no program's size."""
        programs = self.controller.programs
        for program_id in self._learners:
            flight = self._flights[program_id]
            shared = flight.shared_tokens
            if not (shared and self.door.is_started(program_id)):
                continue
            program = programs.get(program_id)
            if program is not None:
                yield program.tenant, shared, flight.shared_segments

    def _size_door(self) -> None:
        """Size the door by the memory last reported, less the shared prefixes' room."""
        budget = self.budget
        reserve = shared_reserve(self._shared_prefixes()) if budget.reserves else 0
        self.door.size_to(budget.tokens(reserve), budget.batch_slots)

    def _resize_door(self) -> None:
        """The shared prefixes changed (a first call found one, or learned it larger; a
        program ended): size the door again where it sizes by reported memory."""
        if self.door_open and self.budget.memory_tokens > 0:
            self._size_door()

    def _predicted(self, program_id: str, tokens: int) -> int:
        return self.growth.predict(self._kind(program_id), tokens)

    def _grow(self, program_id: str, flight: _Flight, tokens: int) -> None:
        """The program's context holds ``tokens`` private tokens now: the door counts its
        predicted peak from here."""
        flight.private_tokens = tokens
        flight.peak_tokens = max(flight.peak_tokens, tokens)
        if self.door.enabled:
            self.door.resize(program_id, self._predicted(program_id, tokens), tokens)

    # -- bookkeeping
    def _flight(self, program_id: str) -> _Flight:
        flight = self._flights.get(program_id)
        if flight is None:
            flight = self._flights[program_id] = _Flight()
        return flight

    def _release(self, program_id: str) -> None:
        self.retained.pop(program_id, None)

    def _end(self, program_id: str, now: float) -> list[Action]:
        had_flight = self._flights.pop(program_id, None) is not None
        self._learners.pop(program_id, None)
        self._dirty.pop(program_id, None)
        self._door_waits.pop(program_id, None)  # a dropped program's wait is nobody's now
        self._release(program_id)
        ended: list[Action] = [ProgramEnded(program_id)] if had_flight else []
        if had_flight:
            self._resize_door()  # its share of a shared prefix may free room for those in line
        return ended + self._started(self.door.finish(program_id, now), now)

    def _started(self, program_ids: list[str], now: float) -> list[Action]:
        """The action that starts ``program_ids`` (the door let them in at ``now``); ends
        their waits there."""
        if not program_ids:
            return []
        for program_id in program_ids:
            self._door_wait_ended(program_id, now, "let_in")
        return [StartPrograms(tuple(program_ids))]

    # -- door waits
    def _door_wait_starts(self, program_id: str, now: float, *, boundary: bool) -> None:
        """``program_id`` waits at the door from ``now`` (at a call ``boundary``, else at its
        start); a wait already running goes on. Changes only the waits table."""
        self._door_waits.setdefault(program_id, (now, boundary))

    def _door_wait_ended(self, program_id: str, now: float, how: str) -> None:
        """``program_id``'s wait at the door ended at ``now`` (``how``: ``let_in``, ``left``,
        ``ended``): emits ``program.door_waited`` with its length, which the metrics count as
        queueing (critical-path queue idle, starvation, max wait), the same for ``bench`` and
        ``serve``. Nothing when it was not waiting."""
        waiting = self._door_waits.pop(program_id, None)
        if waiting is None:
            return
        since, boundary = waiting
        program = self.controller.programs.get(program_id)
        data: dict[str, Scalar] = {
            "door_s": now - since,
            "at": "boundary" if boundary else "start",
            "ended": how,
        }
        tenant = program.tenant if program is not None else ""
        event = Event(now, EventKind.PROGRAM_DOOR_WAITED, program_id, tenant=tenant, data=data)
        self.controller.sink.emit(event)

    def door_waits(self) -> dict[str, float]:
        """Programs waiting at the door now -> since when: the waits whose
        ``program.door_waited`` is still to come, which live metrics count as of now (a copy:
        a wait leaves this table in the step that emits its event, so none counts twice)."""
        return {program_id: since for program_id, (since, _) in self._door_waits.items()}

    def in_flight(self, program_id: str) -> int:
        """Calls of the program in the engine."""
        flight = self._flights.get(program_id)
        return len(flight.calls) if flight is not None else 0
