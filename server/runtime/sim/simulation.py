"""Virtual-time replay of a trace through the controller and the simulated engine.

The driver plays the agents: a program arrives, its root nodes are revealed, LLM nodes are
queued in the engine with a ticket from the controller, tool nodes "run" for their recorded
latency, and a node's children are revealed only once all its parents finished (the scheduler
is never clairvoyant). When a program enters a tool wait, the tool-wait KV policy decides
keep / offload / recompute from the *estimated* latency distribution. Cancels and failures
propagate: running calls are aborted in the engine, pending tools are ignored.

One global event heap orders arrivals, tool completions, cancels and the engine's own blocks;
everything is deterministic for a given trace and configuration.
"""

from __future__ import annotations

import gc
import heapq
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from agentconsole.kvtiers.tiers import Tier
from agentconsole.kvtiers.toolwait import get_tool_wait_policy
from agentconsole.sample_traces.format import Branch as TraceBranch
from agentconsole.sample_traces.format import LLMNode, Outcome, ToolNode, TraceProgram
from agentconsole.scheduler.admission import ProgramGate
from agentconsole.scheduler.controller import CallUsage, ProgramController, QuotaExceeded
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.engine import Note, SimEngine
from agentconsole.server.runtime.sim.programs import (
    ProgramRun,
    build_contexts,
    program_node,
    program_quotas,
)
from agentconsole.server.runtime.sim.routing import ReplicaRouter
from agentconsole.server.runtime.sim.toolwait import SimToolWait

_ARRIVE, _TOOL_DONE, _CANCEL, _ENGINE, _LLM_DONE, _GATE = 0, 1, 2, 3, 4, 5


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block, then restore it.

    A simulated hour keeps ~230,000 events and their programs alive, so every full collection
    rescans millions of objects that are all still in use: measured, a quarter of the run's
    wall time (10.3 s -> 7.7 s for 3,000 programs). Nothing the run frees depends on it; the
    few cycles it leaves are collected once the block ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True, slots=True)
class SimConfig:
    policy: str = "cp-cache"
    kv_policy: str = "adaptive"
    #: data-parallel engine replicas behind the cache-aware router
    replicas: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)
    fairness: FairnessConfig = field(default_factory=FairnessConfig)
    preemption: PreemptionRule = field(default_factory=PreemptionRule)
    #: a program-aware policy starts a new program only while the private KV of those already
    #: started fits HBM + DRAM (``admission.py``); request-level policies never wait at the door
    program_admission: bool = True
    #: share of HBM + DRAM the started programs' private contexts may claim
    admission_memory_share: float = 0.9


class CostServiceModel:
    """The controller's view of the cost model: one call running alone."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self._per_decode = cost.decode_step_seconds(1, 8192)

    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return self.cost.prefill_seconds(uncached_prompt_tokens) + output_tokens * self._per_decode


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
    def __init__(
        self, programs: list[TraceProgram], cost: CostModel, config: SimConfig | None = None
    ) -> None:
        self.config = config or SimConfig()
        self.cost = cost
        self.log = EventLog()
        self.controller = ProgramController(self.log, CostServiceModel(cost))
        if self.config.replicas < 1:
            raise ValueError("replicas must be >= 1")
        self.engines = [
            SimEngine(
                cost,
                get_policy(self.config.policy),
                self.log,
                config=self.config.engine,
                fairness=self.config.fairness,
                preemption=self.config.preemption,
                name=str(i),
            )
            for i in range(self.config.replicas)
        ]
        self.router = ReplicaRouter(self.engines, cost)
        self.tool_wait = SimToolWait(
            get_tool_wait_policy(self.config.kv_policy), cost, self.controller, self.log
        )
        memory = sum(e.index.capacity(Tier.HBM) + e.index.capacity(Tier.DRAM) for e in self.engines)
        self.gate = ProgramGate(
            int(memory * self.config.admission_memory_share),
            enabled=self.config.program_admission and self.engines[0].queue.policy.program_aware,
        )
        self._programs = programs
        self._runs: dict[str, ProgramRun] = {}
        self._heap: list[tuple[float, int, int, object, int]] = []
        self._seq = 0
        self._engine_at: list[float | None] = [None] * len(self.engines)
        self._engine_stamp = [0] * len(self.engines)
        self._ended = 0
        self._call_overhead_s = cost.efficiency.call_overhead_s
        for program in programs:
            self._push(program.arrival_s, _ARRIVE, program, 0)
            if program.cancel_at_s is not None:
                self._push(program.arrival_s + program.cancel_at_s, _CANCEL, program.id, 0)

    # -- the loop -------------------------------------------------------------------------
    def run(self, progress: Callable[[int, int, float], None] | None = None) -> SimResult:
        """Play every program to its end; ``progress(ended, total, sim_time)`` is called now
        and then. Python's cyclic garbage collector is paused meanwhile (see ``_no_gc``)."""
        with _no_gc():
            return self._run(progress)

    def _run(self, progress: Callable[[int, int, float], None] | None) -> SimResult:
        started = time.perf_counter()
        heap = self._heap
        now = 0.0
        handled = 0
        while heap:
            now, _, kind, payload, extra = heapq.heappop(heap)
            if kind == _ENGINE:
                assert isinstance(payload, int)
                if extra == self._engine_stamp[payload]:
                    self._engine_step(payload, now)
            elif kind == _TOOL_DONE:
                assert isinstance(payload, tuple)
                self._tool_done(payload[0], payload[1], extra, now)
            elif kind == _LLM_DONE:
                assert isinstance(payload, Note)
                self._llm_returned(extra, payload, now)
            elif kind == _ARRIVE:
                assert isinstance(payload, TraceProgram)
                self._arrive(payload, now)
            elif kind == _GATE:
                self._start_parked(self.gate.wake(now), now)
            else:
                self._cancel(str(payload), now)
            handled += 1
            if progress is not None and handled % 5000 == 0:
                progress(self._ended, len(self._programs), now)
        if progress is not None:
            progress(self._ended, len(self._programs), now)
        for engine in self.engines:
            engine.complete(now)  # final stats sample
        if self.gate.parked:
            raise AssertionError(f"{self.gate.parked} programs never passed the admission gate")
        return SimResult(
            self.log,
            time.perf_counter() - started,
            now,
            self.engines,
            self.controller,
            self.gate.parked_total,
        )

    def _push(self, t: float, kind: int, payload: object, extra: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, payload, extra))

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
        self._push(t, _ENGINE, e, self._engine_stamp[e])

    def _engine_step(self, e: int, now: float) -> None:
        engine = self.engines[e]
        self._engine_at[e] = None
        engine.complete(now)
        self._handle(e, engine.drain_notes(), now)
        wake = engine.plan(now)
        self._handle(e, engine.drain_notes(), now)
        if wake is not None:
            self._schedule_engine(e, wake)

    # -- programs --------------------------------------------------------------------------
    def _arrive(self, program: TraceProgram, now: float) -> None:
        run = ProgramRun.of(program)
        self._runs[program.id] = run
        ideal = build_contexts(run, self.cost, self.config.engine.chunked_prefill_size)
        deadline = now + program.deadline_s if program.deadline_s is not None else None
        self.controller.open_program(
            program.id,
            program.tenant,
            now,
            deadline=deadline,
            quotas=program_quotas(program),
            labels={"workload": program.shape},
            ideal_e2e_s=ideal,
        )
        if self.gate.try_start(program.id, run.private_tokens_at_start(), now):
            self._start(run, now)

    def _start(self, run: ProgramRun, now: float) -> None:
        """Reveal the program's root nodes (it passed the admission gate)."""
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

    def _submit_llm(self, run: ProgramRun, i: int, tnode: LLMNode, now: float) -> None:
        program = run.trace
        self.gate.rejoin(program.id)
        blocks = run.contexts[tnode.id]
        e, found = self.router.route(run, blocks)
        run.engine = e
        slow = found.tokens_on(Tier.DRAM) + found.tokens_on(Tier.DISK)
        own = (
            blocks[-1].tokens
            if blocks and blocks[-1].key == f"{program.id}/{tnode.id}/prompt"
            else 0
        )
        lost = max(found.miss_tokens - own, 0)  # earlier context no longer resident
        restore = self.cost.transfer_seconds(slow) + (
            self.cost.prefill_seconds(lost, found.hit_tokens) if lost else 0.0
        )
        prompt = found.requested_tokens
        ticket = self.controller.ticket(
            program.id,
            tnode.id,
            now,
            prompt_tokens=prompt,
            cached_tokens=found.hit_tokens,
            restore_cost_s=restore,
        )
        call = SimCall(ticket, blocks, tnode.output_tokens, f"{program.id}/{tnode.id}/out")
        run.llm_calls[ticket.call_id] = (i, e)
        self.engines[e].submit(call, now)
        self._kick(e, now)

    def _start_tool(self, run: ProgramRun, i: int, attempt: int, now: float) -> None:
        tnode = run.trace.nodes[i]
        assert isinstance(tnode, ToolNode)
        self.controller.start_node(run.trace.id, tnode.id, now)
        run.tools[i] = attempt
        self._push(now + tnode.attempts[attempt].latency_s, _TOOL_DONE, (run.trace.id, i), attempt)

    def _tool_done(self, pid: str, i: int, attempt: int, now: float) -> None:
        run = self._runs[pid]
        if run.ended or run.tools.get(i) != attempt:
            return
        del run.tools[i]
        tnode = run.trace.nodes[i]
        assert isinstance(tnode, ToolNode)
        record = tnode.attempts[attempt]
        last = attempt + 1 >= len(tnode.attempts)
        _, retry = self.controller.finish_tool(
            pid, tnode.id, now, outcome=record.outcome.value, latency_s=record.latency_s, final=last
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
                controller.start_node(ticket.program_id, ticket.node_id, now)
            elif note.what == "first_token":
                controller.first_token(ticket.program_id, ticket.node_id, now)
            elif note.what == "preempted":
                controller.requeue_node(ticket.program_id, ticket.node_id, now)
            elif note.what == "failed":
                run.llm_calls.pop(ticket.call_id, None)
                self._end(run, now, success=False)
            elif self._call_overhead_s > 0.0:
                # the engine is done with it; the answer reaches the agent a little later
                self._push(now + self._call_overhead_s, _LLM_DONE, note, e)
            else:
                self._llm_done(run, e, note, now)

    def _llm_returned(self, e: int, note: Note, now: float) -> None:
        run = self._runs.get(note.call.ticket.program_id)
        if run is not None and not run.ended:
            self._llm_done(run, e, note, now)

    def _llm_done(self, run: ProgramRun, e: int, note: Note, now: float) -> None:
        call = note.call
        i, _ = run.llm_calls.pop(call.call_id)
        usage = CallUsage(
            call.prompt_tokens,
            call.hit_tokens,
            call.generated,
            call.service_s,
            call.queue_s,
            call.restore_s,
        )
        try:
            self.controller.finish_llm(run.trace.id, call.ticket.node_id, now, usage)
        except QuotaExceeded:
            self._end(run, now, success=False)
            return
        self._node_done(run, i, now)
        program_aware = self.engines[e].queue.policy.program_aware
        if program_aware and not run.ended and run.tools and not run.llm_calls:
            engine = self.engines[e]
            decision = self.tool_wait.hold(run, engine, note.path, now, self.gate.parked_tokens)
            # its context stays in the working set as long as the decision keeps it
            kept = decision.context_kept_s if decision is not None else 0.0
            self._start_parked(self.gate.step_out(run.trace.id, now + kept, now), now)

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

    def _cancel(self, pid: str, now: float) -> None:
        run = self._runs.get(pid)
        if run is None or run.ended:
            return
        self.controller.cancel_program(pid, now)
        self._stop(run, now)

    def _end(self, run: ProgramRun, now: float, *, success: bool) -> None:
        self.controller.finish_program(run.trace.id, now, success=success)
        self._stop(run, now)

    def _stop(self, run: ProgramRun, now: float) -> None:
        run.ended = True
        self._ended += 1
        for call_id, (_, e) in run.llm_calls.items():
            self.engines[e].abort(call_id, now)
        run.llm_calls.clear()
        run.tools.clear()
        self._start_parked(self.gate.finish(run.trace.id, now), now)

    def _start_parked(self, program_ids: list[str], now: float) -> None:
        """Start the programs the gate let in; while others wait, wake it when the earliest
        retention it still counts lapses."""
        for pid in program_ids:
            self._start(self._runs[pid], now)
        wake = self.gate.next_expiry()
        if wake is not None:
            self._push(wake, _GATE, None, 0)
