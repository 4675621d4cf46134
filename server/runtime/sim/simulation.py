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

import heapq
import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.results import Match
from agentconsole.kvtiers.router import RouteWeights, WorkerState, choose_worker
from agentconsole.kvtiers.tiers import Tier
from agentconsole.kvtiers.toolwait import (
    ToolWait,
    ToolWaitPolicy,
    get_tool_wait_policy,
    pressure_from_queue,
)
from agentconsole.sample_traces.format import Branch as TraceBranch
from agentconsole.sample_traces.format import (
    LLMNode,
    Outcome,
    ToolNode,
    TraceProgram,
    context_segments,
)
from agentconsole.sample_traces.format import ToolKind as TraceToolKind
from agentconsole.scheduler.controller import CallUsage, ProgramController, QuotaExceeded
from agentconsole.scheduler.events import Event, EventKind, EventLog
from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.latency import LatencyDistribution
from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.scheduler.program import (
    Branch,
    NodeKind,
    Quotas,
    RetryPolicy,
    ToolKind,
    ToolSpec,
)
from agentconsole.scheduler.program import (
    Node as ProgramNode,
)
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.engine import Note, SimEngine

_ARRIVE, _TOOL_DONE, _CANCEL, _ENGINE = 0, 1, 2, 3
_KV_ACTION = {
    "keep": CacheAction.KEEP,
    "offload": CacheAction.OFFLOAD,
    "recompute": CacheAction.DROP,
}


# trace enums -> program enums, looked up once (Enum(value) runs Python code on a hot path)
_BRANCH = {b: Branch(b.value) for b in TraceBranch}
_TOOL_KIND = {k: ToolKind(k.value) for k in TraceToolKind}


def _block(key: str, tokens: int) -> list[Block]:
    """A private segment as a (possibly empty) block list: zero-token segments are skipped."""
    return [Block(key, tokens)] if tokens > 0 else []


@dataclass(frozen=True, slots=True)
class SimConfig:
    policy: str = "cp-cache"
    kv_policy: str = "adaptive"
    #: data-parallel engine replicas behind the cache-aware router
    replicas: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)
    fairness: FairnessConfig = field(default_factory=FairnessConfig)
    preemption: PreemptionRule = field(default_factory=PreemptionRule)


class CostServiceModel:
    """The controller's view of the cost model: one call running alone."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self._per_decode = cost.decode_step_seconds(1, 8192)

    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return self.cost.prefill_seconds(uncached_prompt_tokens) + output_tokens * self._per_decode


@dataclass(slots=True, eq=False)
class _Run:
    trace: TraceProgram
    waiting_parents: list[int]
    children: list[list[int]]
    needed: int  # non-discarded nodes still to finish
    llm_calls: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (node, engine)
    tools: dict[int, int] = field(default_factory=dict)  # node index -> attempt index
    engine: int | None = None  # replica that ran its last call (where its context lives)
    contexts: dict[str, list[Block]] = field(default_factory=dict)  # LLM node -> its prompt
    ended: bool = False


@dataclass(slots=True)
class SimResult:
    events: EventLog
    wall_s: float
    sim_s: float
    engines: list[SimEngine]
    controller: ProgramController

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
        self._route = RouteWeights(
            recompute_seconds_per_token=cost.prefill_seconds(8192) / 8192,
            tiers=self.engines[0].tiers,
        )
        self.kv_policy: ToolWaitPolicy = get_tool_wait_policy(self.config.kv_policy)
        self._programs = programs
        self._runs: dict[str, _Run] = {}
        self._heap: list[tuple[float, int, int, object, int]] = []
        self._seq = 0
        self._pressure_avg = (0.0, 0.0)  # (as of, moving average of tool-wait pressure)
        self._engine_at: list[float | None] = [None] * len(self.engines)
        self._engine_stamp = [0] * len(self.engines)
        self._ended = 0
        for program in programs:
            self._push(program.arrival_s, _ARRIVE, program, 0)
            if program.cancel_at_s is not None:
                self._push(program.arrival_s + program.cancel_at_s, _CANCEL, program.id, 0)

    # -- the loop -------------------------------------------------------------------------
    def run(self, progress: Callable[[int, int, float], None] | None = None) -> SimResult:
        """Play every program to its end; ``progress(ended, total, sim_time)`` is called now
        and then."""
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
            elif kind == _ARRIVE:
                assert isinstance(payload, TraceProgram)
                self._arrive(payload, now)
            else:
                self._cancel(str(payload), now)
            handled += 1
            if progress is not None and handled % 5000 == 0:
                progress(self._ended, len(self._programs), now)
        if progress is not None:
            progress(self._ended, len(self._programs), now)
        for engine in self.engines:
            engine.complete(now)  # final stats sample
        return SimResult(
            self.log, time.perf_counter() - started, now, self.engines, self.controller
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
        index = {n.id: i for i, n in enumerate(program.nodes)}
        waiting = [len(n.parents) for n in program.nodes]
        children: list[list[int]] = [[] for _ in program.nodes]
        for i, node in enumerate(program.nodes):
            for parent in node.parents:
                children[index[parent]].append(i)
        needed = sum(1 for n in program.nodes if n.branch is not TraceBranch.DISCARDED)
        run = _Run(program, waiting, children, needed)
        self._runs[program.id] = run
        ideal = self._prepare(run)
        q = program.quotas
        quotas = (
            Quotas(
                wall_time_s=q.max_wall_s,
                tokens=q.max_total_tokens,
                tool_calls=q.max_tool_calls,
                branches=q.max_branches,
            )
            if q
            else None
        )
        deadline = now + program.deadline_s if program.deadline_s is not None else None
        self.controller.open_program(
            program.id,
            program.tenant,
            now,
            deadline=deadline,
            quotas=quotas,
            labels={"workload": program.shape},
            ideal_e2e_s=ideal,
        )
        for i, count in enumerate(waiting):
            if count == 0:
                self._reveal(run, i, now)

    def _prepare(self, run: _Run) -> float:
        """Build every LLM node's prompt blocks once, and return the program's E2E alone on a
        warm engine (shared prefix cached): the denominator of its slowdown. One pass over
        the DAG in listing (topological) order."""
        program = run.trace
        cost = self.cost
        seen: set[Hashable] = {p.id for p in program.prefix}
        finish: dict[str, float] = {}
        through: dict[str, list[Block]] = {}  # context a node's children inherit
        for node in program.nodes:
            start = max((finish[p] for p in node.parents), default=0.0)
            if isinstance(node, ToolNode):
                finish[node.id] = start + node.duration_s
                if len(node.parents) == 1 and node.parents[0] in through:
                    result = _block(f"{program.id}/{node.id}/result", node.result_tokens)
                    through[node.id] = through[node.parents[0]] + result
                continue
            segments = self._context(run, node, through)
            run.contexts[node.id] = segments
            total = sum(s.tokens for s in segments)
            new = sum(s.tokens for s in segments if s.key not in seen)
            seen.update(s.key for s in segments)
            seen.add(f"{program.id}/{node.id}/out")
            through[node.id] = segments + _block(f"{program.id}/{node.id}/out", node.output_tokens)
            took = cost.prefill_seconds(
                max(new, 1), total - new, self.config.engine.chunked_prefill_size
            )
            took += cost.decode_steps_seconds(1, total + 1, node.output_tokens - 1)
            finish[node.id] = start + took
        return max(finish.values(), default=0.0)

    @staticmethod
    def _context(run: _Run, node: LLMNode, through: dict[str, list[Block]]) -> list[Block]:
        """The node's prompt blocks (the trace's context rule). Along a chain a child's
        context is its parent's plus the parent's own segments, so it is built from the
        parent's in O(1); joins and roots take the general rule."""
        program = run.trace
        own = _block(f"{program.id}/{node.id}/prompt", node.prompt_tokens)
        if len(node.parents) == 1 and node.parents[0] in through:
            return through[node.parents[0]] + own
        segments = context_segments(program, node.id)
        return [Block(s.key, s.tokens, s.public) for s in segments if s.tokens]

    def _reveal(self, run: _Run, i: int, now: float) -> None:
        tnode = run.trace.nodes[i]
        pid = run.trace.id
        branch = _BRANCH[tnode.branch]
        if isinstance(tnode, ToolNode):
            spec = ToolSpec(
                tnode.tool,
                _TOOL_KIND[tnode.tool_kind],
                tnode.side_effect,
                tnode.idempotent,
                tnode.timeout_s,
            )
            node = ProgramNode(
                tnode.id,
                pid,
                NodeKind.TOOL,
                tnode.parents,
                tool=spec,
                branch=branch,
                retry=RetryPolicy(max(len(tnode.attempts), 1)),
            )
        else:
            node = ProgramNode(
                tnode.id,
                pid,
                NodeKind.LLM,
                tnode.parents,
                branch=branch,
                model_candidates=(tnode.model,) if tnode.model else (),
            )
        try:
            self.controller.add_node(pid, node, now)
        except QuotaExceeded:
            self._end(run, now, success=False)
            return
        if isinstance(tnode, ToolNode):
            self._start_tool(run, i, 0, now)
        else:
            self._submit_llm(run, i, tnode, now)

    def _submit_llm(self, run: _Run, i: int, tnode: LLMNode, now: float) -> None:
        program = run.trace
        blocks = run.contexts[tnode.id]
        e, found = self._route_call(run, blocks)
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

    def _route_call(self, run: _Run, blocks: list[Block]) -> tuple[int, Match]:
        """The replica to run a call on (Dynamo-style KV-aware score) and its match there.

        A program's first call is scored on every replica; later calls only on the replica
        holding its context and the least loaded one (where else could it be cheaper?)."""
        engines = self.engines
        tenant = run.trace.tenant
        if len(engines) == 1:
            return 0, engines[0].index.peek(tenant, blocks)
        if run.engine is None:
            candidates = list(range(len(engines)))
        else:
            idle = min(range(len(engines)), key=lambda k: engines[k].load)
            candidates = [run.engine] if idle == run.engine else [run.engine, idle]
        matches = [engines[k].index.peek(tenant, blocks) for k in candidates]
        prompt = matches[0].requested_tokens
        workers = [
            WorkerState(
                engines[k].name,
                m.tokens_by_tier,
                int(engines[k].prefill_load),
                engines[k].decode_load,
            )
            for k, m in zip(candidates, matches, strict=True)
        ]
        best = choose_worker(prompt, workers, self._route)
        return candidates[best], matches[best]

    def _start_tool(self, run: _Run, i: int, attempt: int, now: float) -> None:
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
            else:
                self._llm_done(run, e, note, now)

    def _llm_done(self, run: _Run, e: int, note: Note, now: float) -> None:
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
            self._tool_wait(run, self.engines[e], note.path, now)

    def _node_done(self, run: _Run, i: int, now: float) -> None:
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

    def _tool_wait(self, run: _Run, engine: SimEngine, path: list[Node], now: float) -> None:
        """The program waits on tools only: decide what happens to its KV meanwhile."""
        pid = run.trace.id
        mine = f"{pid}/"  # trace segment keys of the program's own nodes start so
        private = [n for n in path if isinstance(n.key, str) and n.key.startswith(mine)]
        private_tokens = sum(n.tokens for n in private)
        if not private_tokens:
            return
        latency = self._slowest_tool(run)
        index = engine.index
        # what admission may take: free plus evictable, but not what the gate spares
        reclaimable = max(index.evictable(Tier.HBM) - engine.retained_tokens(now), 0)
        free = index.free(Tier.HBM) + reclaimable
        demand, queued = engine.queued_demand, len(engine.queue)
        per_token = self.cost.prefill_seconds(private_tokens) / private_tokens
        wait = ToolWait(
            private_tokens=private_tokens,
            shared_tokens=sum(n.tokens for n in path) - private_tokens,
            latency=latency,
            tiers=engine.tiers,
            recompute_seconds_per_token=per_token,
            pressure=self._pressure(pressure_from_queue(demand, free), now),
            call_tokens=max(demand / queued, 1.0) if queued else 8192.0,
            gpu_pressure=float(len(engine.running) + len(engine.queue)),
        )
        decision = self.kv_policy.decide(wait)
        action = _KV_ACTION[decision.action.value]
        self.log.emit(
            Event(
                now,
                EventKind.KV_DECISION,
                pid,
                tenant=run.trace.tenant,
                data={
                    "action": decision.action.value,
                    "retain_s": decision.retain_seconds,
                    "private_tokens": private_tokens,
                    "pressure": wait.pressure,
                    **{f"cost_{k}": v for k, v in decision.expected_costs.items()},
                },
            )
        )
        engine.apply_cache_action(pid, private, action, decision.retain_seconds, now)

    def _pressure(self, now_pressure: float, now: float) -> float:
        """Memory pressure for a hold that lasts seconds to minutes: the larger of the present
        pressure and its moving average over the last ~30 s (an empty queue at decision time
        says little about the next minute)."""
        last_t, last = self._pressure_avg
        weight = math.exp(-(now - last_t) / 30.0) if now > last_t else 1.0
        average = weight * last + (1.0 - weight) * now_pressure
        self._pressure_avg = (now, average)
        return max(now_pressure, average)

    def _slowest_tool(self, run: _Run) -> LatencyDistribution:
        best: LatencyDistribution | None = None
        for i in run.tools:
            tnode = run.trace.nodes[i]
            assert isinstance(tnode, ToolNode)
            dist = self.controller.tool_distribution(tnode.tool, tnode.tool_kind.value)
            if best is None or dist.mean() > best.mean():
                best = dist
        assert best is not None
        return best

    def _cancel(self, pid: str, now: float) -> None:
        run = self._runs.get(pid)
        if run is None or run.ended:
            return
        self.controller.cancel_program(pid, now)
        self._stop(run, now)

    def _end(self, run: _Run, now: float, *, success: bool) -> None:
        self.controller.finish_program(run.trace.id, now, success=success)
        self._stop(run, now)

    def _stop(self, run: _Run, now: float) -> None:
        run.ended = True
        self._ended += 1
        for call_id, (_, e) in run.llm_calls.items():
            self.engines[e].abort(call_id, now)
        run.llm_calls.clear()
        run.tools.clear()
