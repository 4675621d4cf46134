"""Replay trace programs against a live ``Runtime`` in wall-clock time.

The wall-clock counterpart of the simulator's virtual-time ``Simulation``, for measuring the
real engine on the same workloads. It plays the agents of the stock SGLang arms of the
real-engine benchmarks (``benchmarks/bench_sglang_cpu.py``, ``benchmarks/gpu_lane.py``): stock
SGLang is told nothing about programs, so the replay sends no KV hints. Whatever measures what
``serve`` runs (``calibrate``, those benchmarks' agentconsole arms) replays through serve's own
program glue instead (``agentconsole.replay.served.replay_as_served``), whose tool waits serve's
default policy decides. The agents: a program arrives at its trace time; a node starts when
its parents finished (the scheduler is never told the future); LLM nodes become calls whose
prompt is the node's context rendered by
:class:`~agentconsole.server.runtime.sglang.textbook.TextBook` (exact token counts, same text
for the same segment), with the recorded output length forced; tool nodes sleep for their
recorded latency, attempt by attempt. Tickets come from a ``ProgramController``, exactly as in
the simulator.

Difference from the simulator, kept on purpose: a call's own generated tokens are not reused as
the next call's context (the next prompt renders the ``/out`` segment as trace text), so those
few tokens are prefilled again; prompts of other tenants never share KV, public or not (see
``wire.cache_salt``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from agentconsole.sample_traces.format import (
    Branch as TraceBranch,
)
from agentconsole.sample_traces.format import (
    LLMNode,
    Outcome,
    ToolNode,
    TraceNode,
    TraceProgram,
    context_segments,
)
from agentconsole.scheduler.controller import CallUsage, ProgramController, ServiceModel
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.program import Branch, NodeKind, RetryPolicy, ToolKind, ToolSpec
from agentconsole.scheduler.program import Node as ProgramNode
from agentconsole.scheduler.runtime import GenerationRequest, Runtime
from agentconsole.server.live.enginequeue import EngineQueues
from agentconsole.server.runtime.sglang.textbook import TextBook


@dataclass(frozen=True, slots=True)
class ProgramOutcome:
    program_id: str
    tenant: str
    shape: str
    e2e_s: float
    success: bool
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    arrival_s: float = 0.0  # the trace's arrival time (seconds after the replay began)
    cancelled: bool = False  # the trace's own cancel ended it first (no failure of the serving)


@dataclass(slots=True)
class _Run:
    trace: TraceProgram
    start: float
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    sent: set[str] = field(default_factory=set)  # segment keys already sent (cache estimate)


class LiveReplay:
    """Plays ``programs`` through ``runtime`` (started) once; see the module docstring."""

    def __init__(
        self,
        runtime: Runtime,
        programs: list[TraceProgram],
        book: TextBook,
        service: ServiceModel,
    ) -> None:
        self.runtime = runtime
        #: what the engine runs while calls wait (the drain's batch), read as serve reads it
        self._queues = EngineQueues({"": runtime})
        self.programs = programs
        self.book = book
        self.log = EventLog()
        self.controller = ProgramController(self.log, service)
        self._tenant_sent: dict[str, set[str]] = {}

    async def run(self) -> list[ProgramOutcome]:
        """Replay every program; returns one outcome per program, in trace order."""
        t0 = time.time()
        return list(await asyncio.gather(*(self._program(p, t0) for p in self.programs)))

    async def _program(self, trace: TraceProgram, t0: float) -> ProgramOutcome:
        await asyncio.sleep(max(t0 + trace.arrival_s - time.time(), 0.0))
        now = time.time()
        run = _Run(trace, now)
        deadline = now + trace.deadline_s if trace.deadline_s is not None else None
        self.controller.open_program(
            trace.id, trace.tenant, now, deadline=deadline, labels={"workload": trace.shape}
        )
        tasks: dict[str, asyncio.Task[bool]] = {}
        for node in trace.nodes:  # listed parents-first
            parents = [tasks[p] for p in node.parents]
            tasks[node.id] = asyncio.create_task(self._node(run, node, parents))
        needed = [tasks[n.id] for n in trace.nodes if n.branch is not TraceBranch.DISCARDED]
        waiter = asyncio.gather(*needed)
        cancelled = False
        try:
            if trace.cancel_at_s is None:
                ok = all(await waiter)
            else:
                done, _ = await asyncio.wait({waiter}, timeout=trace.cancel_at_s)
                cancelled = not done
                ok = bool(done) and all(waiter.result())
        finally:
            for task in tasks.values():  # discarded branches still running, or a cancel
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            if not waiter.done() or cancelled:
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter  # ended by the cancel above; retrieve it
        end = time.time()
        if cancelled:
            self.controller.cancel_program(trace.id, end)
            ok = False
        else:
            self.controller.finish_program(trace.id, end, success=ok)
        return ProgramOutcome(
            trace.id,
            trace.tenant,
            trace.shape,
            end - run.start,
            ok,
            run.calls,
            run.prompt_tokens,
            run.cached_tokens,
            trace.arrival_s,
            cancelled,
        )

    async def _node(self, run: _Run, node: TraceNode, parents: list[asyncio.Task[bool]]) -> bool:
        if parents and not all(await asyncio.gather(*parents)):
            return False
        self.controller.add_node(run.trace.id, program_node(node, run.trace.id), time.time())
        if isinstance(node, ToolNode):
            return await self._tool(run, node)
        return await self._llm(run, node)

    async def _llm(self, run: _Run, node: LLMNode) -> bool:
        trace = run.trace
        segments = context_segments(trace, node.id)
        prompt = "".join(self.book.text(s.key, s.tokens) for s in segments)
        public = 0
        for s in segments:
            if not s.public:
                break
            public += len(self.book.text(s.key, s.tokens))
        sent = self._tenant_sent.setdefault(trace.tenant, set())
        cached = 0
        for s in segments:  # what this tenant sent before is probably still resident
            if s.key not in sent:
                break
            cached += s.tokens
        total = sum(s.tokens for s in segments)
        now = time.time()
        ticket = self.controller.ticket(
            trace.id,
            node.id,
            now,
            prompt_tokens=total,
            cached_tokens=cached,
            queued_behind=self._queues.behind("", trace.id),
            max_output_tokens=node.max_tokens,
        )
        request = GenerationRequest(
            ticket,
            prompt,
            max_tokens=node.output_tokens,
            forced_output_tokens=node.output_tokens,
            cache_namespace=trace.tenant,
            public_prefix_chars=public,
        )
        stream = self.runtime.submit(request)
        try:
            first = True
            async for _ in stream:
                if first:
                    first = False
                    t = time.time()
                    self.controller.start_node(trace.id, node.id, t)
                    self.controller.first_token(trace.id, node.id, t)
            result = await stream.result()
        except asyncio.CancelledError:
            await self.runtime.abort(ticket.call_id)
            raise
        sent.update(s.key for s in segments)
        sent.add(f"{trace.id}/{node.id}/out")
        run.calls += 1
        run.prompt_tokens += result.prompt_tokens
        run.cached_tokens += result.cached_tokens
        if first:  # aborted before any token
            self.controller.start_node(trace.id, node.id, time.time())
        usage = CallUsage(
            result.prompt_tokens,
            result.cached_tokens,
            result.output_tokens,
            result.service_s,
            result.queue_s,
        )
        self.controller.finish_llm(trace.id, node.id, time.time(), usage)
        return result.finish_reason != "abort"

    async def _tool(self, run: _Run, node: ToolNode) -> bool:
        trace = run.trace
        for k, attempt in enumerate(node.attempts):
            self.controller.start_node(trace.id, node.id, time.time())
            await asyncio.sleep(attempt.latency_s)
            last = k + 1 == len(node.attempts)
            _, retry = self.controller.finish_tool(
                trace.id,
                node.id,
                time.time(),
                outcome=attempt.outcome.value,
                latency_s=attempt.latency_s,
                final=last,
            )
            if attempt.outcome is Outcome.OK or last:
                return True
            if not retry:
                return False
        return True


def program_node(node: TraceNode, program_id: str) -> ProgramNode:
    """The controller's node for a trace node (as the simulator reveals it)."""
    branch = Branch(node.branch.value)
    if isinstance(node, ToolNode):
        spec = ToolSpec(
            node.tool,
            ToolKind(node.tool_kind.value),
            node.side_effect,
            node.idempotent,
            node.timeout_s,
        )
        retry = RetryPolicy(max(len(node.attempts), 1))
        return ProgramNode(
            node.id, program_id, NodeKind.TOOL, node.parents, tool=spec, branch=branch, retry=retry
        )
    return ProgramNode(node.id, program_id, NodeKind.LLM, node.parents, branch=branch)
