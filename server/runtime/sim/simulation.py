"""Virtual-time replay of a trace through the program driver and the simulated engines.

The simulation plays the agents: a program arrives, its root nodes are revealed, LLM nodes are
queued in an engine with a ticket, tool nodes "run" for their recorded latency, and a node's
children are revealed only once all its parents finished (the scheduler is never
clairvoyant). Every program-level decision (the door, ticket inputs, tool-wait KV actions,
what a call's end, a tool, a cancel mean) is the :class:`ProgramDriver`'s, the same object
``serve`` drives; this module only carries its actions out in virtual time.

Typed events (:mod:`sim.timeline`) on one heap order arrivals, tool completions, cancels,
answers reaching their agent and the engines' own blocks; the loop pops one, fires it and lets
the driver settle what that instant changed. Everything is deterministic for a given trace and
configuration.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentconsole.kvtiers.advisor import ToolWaitAdvisor
from agentconsole.kvtiers.node import Block
from agentconsole.kvtiers.results import Match
from agentconsole.kvtiers.tiers import Tier
from agentconsole.kvtiers.toolwait import DEFAULT_TOOL_WAIT_POLICY, get_tool_wait_policy
from agentconsole.sample_traces.format import Branch as TraceBranch
from agentconsole.sample_traces.format import LLMNode, Outcome, ToolNode, TraceProgram
from agentconsole.scheduler.actions import (
    AbortCalls,
    Action,
    CacheHint,
    ProgramEnded,
    StartPrograms,
    StopProgram,
)
from agentconsole.scheduler.backlog import drain_batch
from agentconsole.scheduler.controller import CallUsage, ProgramController, QuotaExceeded
from agentconsole.scheduler.doorroom import DOOR_MEMORY_SHARE, marks_public
from agentconsole.scheduler.driver import ProgramDriver
from agentconsole.scheduler.events import EventLog, Scalar, paused_gc
from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.models import ModelRequest
from agentconsole.scheduler.policies import DEFAULT_POLICY, get_policy
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.scheduler.runtime import PrefixProbe, chained_segments
from agentconsole.server.runtime.sim import timeline
from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.carrier import CostServiceModel, SimEngines, private_nodes
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.engine import Note, SimEngine
from agentconsole.server.runtime.sim.models import ModelPlacer, ModelSetup
from agentconsole.server.runtime.sim.programs import (
    ProgramRun,
    build_contexts,
    program_node,
)
from agentconsole.server.runtime.sim.routing import ReplicaRouter

__all__ = ["CostServiceModel", "SimConfig", "SimResult", "Simulation"]


@dataclass(frozen=True, slots=True)
class SimConfig:
    policy: str = DEFAULT_POLICY
    kv_policy: str = DEFAULT_TOOL_WAIT_POLICY
    #: data-parallel engine replicas behind the cache-aware router
    replicas: int = 1
    #: how calls are placed over the replicas (``kvtiers.router.get_router``): ``affinity``,
    #: what ``serve --dp N`` does, or ``round-robin``, SGLang's own data-parallel default
    routing: str = "affinity"
    engine: EngineConfig = field(default_factory=EngineConfig)
    fairness: FairnessConfig = field(default_factory=FairnessConfig)
    preemption: PreemptionRule = field(default_factory=PreemptionRule)
    #: a program-aware policy starts a new program only while the private KV of those already
    #: started fits HBM + DRAM (``scheduler/door.py``); request-level policies never wait there
    program_admission: bool = True
    #: share of HBM + DRAM the started programs' private contexts may claim
    admission_memory_share: float = DOOR_MEMORY_SHARE
    #: the door starts the next program whenever an engine would run below its batch
    #: (work-conserving; off: predicted working sets alone)
    admission_fill: bool = True
    #: programs waiting at the door start by response ratio of their kind's expected run
    #: (``scheduler/doorline.py``); off: first come first served
    admission_shortest_first: bool = True
    #: several models, each on its own replicas, and the selector giving each call one
    #: (``sim/models.py``); ``None``: one model, ``replicas`` engines of the given cost model
    models: ModelSetup | None = None


@dataclass(slots=True)
class SimResult:
    events: EventLog
    wall_s: float
    sim_s: float
    engines: list[SimEngine]
    controller: ProgramController
    #: programs that waited at the admission gate before starting
    parked_programs: int = 0

    @property
    def engine(self) -> SimEngine:
        """The first (with one replica, the only) engine."""
        return self.engines[0]


class Simulation:
    """Plays ``programs`` against ``config.replicas`` engines; :meth:`run` once."""

    def __init__(
        self, programs: list[TraceProgram], cost: CostModel, config: SimConfig | None = None
    ) -> None:
        self.config = config = config or SimConfig()
        if config.replicas < 1:
            raise ValueError("replicas must be >= 1")
        self.cost = cost
        self.log = EventLog()
        service = CostServiceModel(cost)
        self.controller = ProgramController(self.log, service)
        policy = get_policy(config.policy)
        self.placer: ModelPlacer | None = None
        if config.models is None:
            self.engines = [self._engine(cost, str(i), {}) for i in range(config.replicas)]
        else:  # each model on its own replicas; the controller's estimates use ``cost``
            pools = config.models.pools
            costs = [pool.cost() for pool in pools]
            self.engines = [
                self._engine(c, f"{pool.name}/{i}", {"model": pool.name, "gpus": pool.tp})
                for pool, c in zip(pools, costs, strict=True)
                for i in range(pool.replicas)
            ]
            self.placer = ModelPlacer(config.models, self.engines, costs, config.routing)
        self.router = ReplicaRouter(self.engines, cost, config.routing)
        self._runs: dict[str, ProgramRun] = {}
        self.view = SimEngines(self.engines, self._runs)
        self.driver = ProgramDriver(
            self.controller,
            ToolWaitAdvisor(get_tool_wait_policy(config.kv_policy)),
            service,
            program_aware=policy.program_aware,
            admission=config.program_admission,
            memory_share=config.admission_memory_share,
            shortest_first=config.admission_shortest_first,
            fairness=config.fairness,
        )
        self._memory_tokens = sum(
            e.index.capacity(Tier.HBM) + e.index.capacity(Tier.DRAM) for e in self.engines
        )
        #: requests the engines run at once (the door starts a program rather than idle one)
        self._batch_slots = (
            sum(e.config.max_running_requests for e in self.engines) if config.admission_fill else 0
        )
        self._programs = programs
        self._heap: list[tuple[float, int, timeline.SimEvent]] = []
        self._seq = 0
        self._engine_at: list[float | None] = [None] * len(self.engines)
        self._engine_stamp = [0] * len(self.engines)
        self._ended = 0
        self._door_wake: float | None = None
        self._call_overhead_s = cost.efficiency.call_overhead_s
        for program in programs:
            self._push(program.arrival_s, timeline.ProgramArrives(program))
            if program.cancel_at_s is not None:
                at = program.arrival_s + program.cancel_at_s
                self._push(at, timeline.ProgramCancelled(program.id))

    def _engine(self, cost: CostModel, name: str, labels: dict[str, Scalar]) -> SimEngine:
        """An engine of ``cost`` named ``name``, ``labels`` added to its stats (multi-model)."""
        config = self.config
        return SimEngine(
            cost,
            get_policy(config.policy),
            self.log,
            config=config.engine,
            fairness=config.fairness,
            preemption=config.preemption,
            name=name,
            labels=labels,
        )

    # -- the loop -------------------------------------------------------------------------
    def run(self, progress: Callable[[int, int, float], None] | None = None) -> SimResult:
        """Play every program to its end; ``progress(ended, total, sim_time)`` is called now
        and then. Python's cyclic garbage collector is paused meanwhile (``events.paused_gc``)."""
        with paused_gc():
            return self._run(progress)

    def _run(self, progress: Callable[[int, int, float], None] | None) -> SimResult:
        started = time.perf_counter()
        heap, pop, driver = self._heap, heapq.heappop, self.driver
        now, handled = 0.0, 0
        while heap:
            now, _, event = pop(heap)
            event.fire(self, now)
            self._apply(driver.settle(self.view, now), now)
            handled += 1
            if progress is not None and handled % 5000 == 0:
                progress(self._ended, len(self._programs), now)
        if progress is not None:
            progress(self._ended, len(self._programs), now)
        for engine in self.engines:
            engine.complete(now)
            engine.final_stats(now)
        if driver.door.parked:
            raise AssertionError(f"{driver.door.parked} programs never passed the admission gate")
        return SimResult(
            self.log,
            time.perf_counter() - started,
            now,
            self.engines,
            self.controller,
            driver.door.parked_total,
        )

    def _push(self, t: float, event: timeline.SimEvent) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, event))

    def _apply(self, actions: list[Action], now: float) -> None:
        """Carry out the driver's actions; while programs wait at the door, wake it when the
        earliest retention it counts lapses."""
        for action in actions:
            if isinstance(action, StartPrograms):
                for pid in action.program_ids:
                    run = self._runs[pid]
                    if run.held:  # parked at a call boundary: its calls go on
                        held, run.held = run.held, []
                        for i, tnode in held:
                            self._submit_llm(run, i, tnode, now, boundary=False)
                    else:
                        self._start(run, now)
            elif isinstance(action, CacheHint):
                run = self._runs[action.program_id]
                engine = self.engines[run.engine or 0]
                nodes = private_nodes(run)
                engine.apply_cache_action(run.trace.id, nodes, action.action, action.retain_s, now)
            elif isinstance(action, AbortCalls):
                for call_id in action.call_ids:
                    self._abort(call_id, now)
            elif isinstance(action, StopProgram):
                self._end(self._runs[action.program_id], now, success=False)
            elif isinstance(action, ProgramEnded):
                run = self._runs[action.program_id]
                self.engines[run.engine or 0].release_kept(action.program_id, now)
                self.router.forget(action.program_id)
                if self.placer is not None:  # its calls were placed by the models' routers
                    self.placer.forget(action.program_id)
        wake = self.driver.next_wake()
        if wake is not None and wake != self._door_wake:
            self._door_wake = wake
            self._push(wake, timeline.DoorWakes())

    # -- engines ----------------------------------------------------------------------------
    def _kick(self, e: int, now: float) -> None:
        """Make sure engine ``e`` looks at new work soon: plan at ``now`` if it is idle or only
        waiting, else cut its run of fused decode steps at the next step boundary."""
        engine = self.engines[e]
        if engine.in_flight:
            end = engine.interrupt(now)
            if end is not None:
                self._schedule_engine(e, end)
            return
        at = self._engine_at[e]
        if at is None or at > now:
            self._schedule_engine(e, now)

    def _schedule_engine(self, e: int, t: float) -> None:
        self._engine_stamp[e] += 1
        self._engine_at[e] = t
        self._push(t, timeline.EngineWakes(e, self._engine_stamp[e]))

    def engine_wakes(self, e: int, stamp: int, now: float) -> None:
        """Engine ``e`` completes its block and plans the next (a stale wake does nothing)."""
        if stamp != self._engine_stamp[e]:
            return
        engine = self.engines[e]
        self._engine_at[e] = None
        engine.complete(now)
        self._handle(e, engine.drain_notes(), now)
        # decisions on what the block's end changed (a context to keep through a tool wait)
        # come before the engine admits new work, which could evict it
        self._apply(self.driver.settle(self.view, now), now)
        wake = engine.plan(now)
        self._handle(e, engine.drain_notes(), now)
        if wake is not None:
            self._schedule_engine(e, wake)

    def door_wakes(self, now: float) -> None:
        """A retention counted at the door lapsed: parked programs may start."""
        self._door_wake = None
        self._apply(self.driver.tick(now), now)

    # -- programs --------------------------------------------------------------------------
    def arrive(self, program: TraceProgram, now: float) -> None:
        """A program arrives: it is opened, and started unless the door parks it."""
        run = ProgramRun.of(program)
        self._runs[program.id] = run
        ideal = build_contexts(run, self.cost, self.config.engine.chunked_prefill_size)
        deadline = now + program.deadline_s if program.deadline_s is not None else None
        self.controller.open_program(
            program.id,
            program.tenant,
            now,
            deadline=deadline,
            quotas=program.quotas,
            labels={"workload": program.shape},
            ideal_e2e_s=ideal,
        )
        first = run.first_context()
        private = sum(b.tokens for b in first if not b.public)
        probe = None  # what the engines hold of it: asked only where the door's size needs it
        prompt = sum(b.tokens for b in first)
        if self.driver.door_open and not marks_public(private, prompt):
            probe = PrefixProbe(prompt, cached_tokens=self._held_at_arrival(run, first))
        slots = self._batch_slots
        memory = self._memory_tokens
        if self.driver.arrive(program.id, private, memory, now, held=probe, batch_slots=slots):
            self._start(run, now)

    def _held_at_arrival(self, run: ProgramRun, first: list[Block]) -> int:
        """What the engines hold of a new program's first prompt ``first``, for the door
        (``runtime/prefixcredit.py``, the rule ``serve`` credits it by): only the replica its
        first call runs on saves anything, so what all the replicas the router could place it
        on hold, as ``serve --dp`` credits it. With several models the selector picks the model
        when the call is sent, so it may run on any candidate of its node (none listed: every
        model): the least over them of that model's credit. Changes nothing."""
        tenant = run.trace.tenant
        if self.placer is not None:
            node = next((n for n in run.trace.nodes if isinstance(n, LLMNode)), None)
            candidates = _candidates_of(node) if node is not None else ()
            output = node.output_tokens if node is not None else 0
            return self.placer.held_where_placed(run.trace.id, tenant, first, candidates, output)
        return self.router.held_where_placed(run.trace.id, tenant, first)

    def _start(self, run: ProgramRun, now: float) -> None:
        """Reveal the program's root nodes (it passed the admission door)."""
        for i, count in enumerate(run.waiting_parents):
            if count == 0:
                self._reveal(run, i, now)

    def _reveal(self, run: ProgramRun, i: int, now: float) -> None:
        tnode = run.trace.nodes[i]
        try:
            self.controller.add_node(run.trace.id, program_node(run.trace.id, tnode), now)
        except QuotaExceeded:
            self._end(run, now, success=False)
            return
        if isinstance(tnode, ToolNode):
            self._start_tool(run, i, 0, now)
        else:
            self._submit_llm(run, i, tnode, now)

    def _submit_llm(
        self, run: ProgramRun, i: int, tnode: LLMNode, now: float, *, boundary: bool = True
    ) -> None:
        program = run.trace
        if boundary and self.controller.programs[program.id].completed_calls:  # a boundary
            parked = self.driver.at_boundary(program.id, self.view, now)
            if parked is not None:
                run.held.append((i, tnode))
                self._apply(parked, now)
                return
        blocks = run.contexts[tnode.id]
        labels: dict[str, Scalar] = {}
        foreign = None
        if self.placer is None:
            e, found = self.router.route(run, blocks)
        else:
            e, found, labels = self._place(run, tnode, blocks)
            foreign = self.placer.foreign(program.tenant, blocks, e)
        first = run.engine is None  # its first call: what it holds is other programs' KV
        if run.engine is not None and run.engine != e:  # moved: its old engine keeps nothing
            self.engines[run.engine].release_kept(program.id, now)
        run.engine = e
        own = (
            blocks[-1].tokens
            if blocks and blocks[-1].key == f"{program.id}/{tnode.id}/prompt"
            else 0
        )
        slow = found.tokens_on(Tier.DRAM) + found.tokens_on(Tier.DISK)
        # a new program's: what it shares with others, named for the door's reserve
        held = chained_segments(e, ((n.key, n.tokens) for n in found.path)) if first else ()
        probe = PrefixProbe(
            found.requested_tokens,
            cached_tokens=found.hit_tokens - slow,
            slow_tokens=slow,
            # the context before this call's own new prompt that is no longer resident
            lost_tokens=max(found.miss_tokens - own, 0),
            held_segments=held,
        )
        private = sum(b.tokens for b in blocks if not b.public)
        here = self.engines[e]
        running = (len(en.running) for en in self.engines)
        behind = drain_batch(len(here.queue), len(here.running), running)
        ticket = self.driver.queue_call(
            program.id,
            tnode.id,
            probe,
            now,
            private_tokens=private,
            queued_behind=behind,
            max_output_tokens=tnode.max_tokens,
        )
        out = f"{program.id}/{tnode.id}/out"
        insert_at = run.inserts.get(tnode.id, -1)
        call = SimCall(ticket, blocks, tnode.output_tokens, out, insert_at, labels, foreign)
        run.llm_calls[ticket.call_id] = (i, e)
        self.engines[e].submit(call, now)
        self._kick(e, now)

    def _place(
        self, run: ProgramRun, tnode: LLMNode, blocks: list[Block]
    ) -> tuple[int, Match, dict[str, Scalar]]:
        """The engine of the model the selector chooses for the call; the choice is recorded on
        the program node, and its model and reason on the call's events."""
        assert self.placer is not None
        node = self.controller.programs[run.trace.id].nodes[tnode.id]
        request = ModelRequest(run.trace.id, tnode.role)
        e, found, choice = self.placer.place(
            run,
            blocks,
            _candidates_of(tnode),
            request,
            node.expected_output_tokens,
            # its max_tokens: what the trace says the agent sent, else what it produced
            tnode.output_tokens if tnode.max_tokens is None else tnode.max_tokens,
        )
        node.model_choice = choice
        labels: dict[str, Scalar] = {
            "model": choice.chosen,
            "model_reason": choice.reason,
            "predicted_finish_s": choice.finish_s[choice.chosen],
        }
        return e, found, labels

    def _start_tool(self, run: ProgramRun, i: int, attempt: int, now: float) -> None:
        tnode = run.trace.nodes[i]
        assert isinstance(tnode, ToolNode)
        self.driver.tool_started(run.trace.id, tnode.id, now)
        run.tools[i] = attempt
        latency = tnode.attempts[attempt].latency_s
        self._push(now + latency, timeline.ToolReturns(run.trace.id, i, attempt))

    def tool_done(self, pid: str, i: int, attempt: int, now: float) -> None:
        """Attempt ``attempt`` of tool node ``i`` ends with its recorded outcome."""
        run = self._runs[pid]
        if run.ended or run.tools.get(i) != attempt:
            return
        del run.tools[i]
        tnode = run.trace.nodes[i]
        assert isinstance(tnode, ToolNode)
        record = tnode.attempts[attempt]
        last = attempt + 1 >= len(tnode.attempts)
        retry = self.driver.tool_finished(
            pid,
            tnode.id,
            now,
            outcome=str(record.outcome),  # the value (str() at C speed, .value is not)
            latency_s=record.latency_s,
            final=last,
        )
        if record.outcome is Outcome.OK or last:
            self._node_done(run, i, now)
        elif retry:
            self._start_tool(run, i, attempt + 1, now)
        else:  # an unsafe retry was refused: the program cannot continue
            self._end(run, now, success=False)

    def _handle(self, e: int, notes: list[Note], now: float) -> None:
        controller = self.controller
        for note in notes:
            ticket = note.call.ticket
            run = self._runs.get(ticket.program_id)
            if run is None or run.ended:
                continue
            if note.what == "started":
                node = controller.programs[ticket.program_id].nodes[ticket.node_id]
                if node.in_flight:  # a preempted call admitted again: its attempt goes on
                    controller.resume_node(ticket.program_id, ticket.node_id, now)
                else:
                    controller.start_node(ticket.program_id, ticket.node_id, now)
            elif note.what == "first_token":
                controller.first_token(ticket.program_id, ticket.node_id, now)
            elif note.what == "preempted":
                controller.requeue_node(ticket.program_id, ticket.node_id, now)
            elif note.what == "failed":  # it can never run here: the agent cannot go on
                run.llm_calls.pop(ticket.call_id, None)
                self._end(run, now, success=False)
            elif self._call_overhead_s > 0.0:
                # the engine is done with it; the answer reaches the agent a little later
                self._push(now + self._call_overhead_s, timeline.AnswerArrives(e, note))
            else:
                self._llm_done(run, note, now)

    def answer_arrives(self, e: int, note: Note, now: float) -> None:
        """A finished call's answer reaches its agent."""
        del e  # the engine is known from the call; kept for the event's record
        run = self._runs.get(note.call.ticket.program_id)
        if run is not None and not run.ended:
            self._llm_done(run, note, now)

    def _llm_done(self, run: ProgramRun, note: Note, now: float) -> None:
        call = note.call
        i, _ = run.llm_calls.pop(call.call_id)
        run.last_path = note.path
        usage = CallUsage(
            call.prompt_tokens,
            call.hit_tokens,
            call.generated,
            call.service_s,
            call.queue_s,
            call.restore_s,
        )
        actions = self.driver.call_ended(
            run.trace.id, call.ticket.node_id, call.call_id, now, usage
        )
        if actions:
            self._apply(actions, now)
            return
        self._node_done(run, i, now)

    def _node_done(self, run: ProgramRun, i: int, now: float) -> None:
        if run.trace.nodes[i].branch is not TraceBranch.DISCARDED:
            run.needed -= 1
            if run.needed == 0:
                self._end(run, now, success=True)
                return
        for child in run.children[i]:
            run.waiting_parents[child] -= 1
            if run.waiting_parents[child] == 0:
                self._reveal(run, child, now)
                if run.ended:
                    return

    def cancel(self, pid: str, now: float) -> None:
        """The trace cancels the program (a user gave up)."""
        run = self._runs.get(pid)
        if run is None or run.ended:
            return
        self._stop(run, self.driver.cancel(pid, now), now)

    def _end(self, run: ProgramRun, now: float, *, success: bool) -> None:
        if not run.ended:
            self._stop(run, self.driver.finish(run.trace.id, now, success=success), now)

    def _stop(self, run: ProgramRun, actions: list[Action], now: float) -> None:
        run.ended = True
        self._ended += 1
        for call_id in list(run.llm_calls):
            self._abort(call_id, now)
        run.tools.clear()
        self._apply(actions, now)

    def _abort(self, call_id: str, now: float) -> None:
        program_id = call_id.split("/", 1)[0]
        run = self._runs.get(program_id)
        where = run.llm_calls.pop(call_id, None) if run is not None else None
        if where is not None:
            self.engines[where[1]].abort(call_id, now)


def _candidates_of(node: LLMNode) -> tuple[str, ...]:
    """The models a trace's LLM node may run on: its candidates, else the one model it names,
    else none (every served model)."""
    return node.candidates or ((node.model,) if node.model else ())
