"""Replay trace programs through the :class:`ProgramService` that ``serve`` runs, in wall time.

What the real-engine benchmarks measure as "agentconsole", and what ``calibrate`` fits the
simulator against (both through ``agentconsole.replay.served.replay_as_served``): every
program-level decision (tickets from the engine's own prefix probe, the program door, the
tool-wait advisor, accounting) is the one ``serve`` takes, because it *is* ``serve``'s service,
minus HTTP. The replay plays the agents as ``runtime.sglang.replay.LiveReplay`` does for stock
SGLang: a program arrives at its trace time, a node starts once its parents finished (the
service is never told the future), an LLM node is a completion of the node's context rendered
to exact token counts with its recorded output length forced (``ignore_eos``), a tool node
reports its start and end through the tool port, attempt by attempt, sleeping its latency.
A program the door parks past its wait limit fails (503), as an agent's call would.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Protocol

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
from agentconsole.scheduler.program import ToolKind, ToolSpec
from agentconsole.server.live.errors import ServiceError
from agentconsole.server.live.intake import ChatCall
from agentconsole.server.live.service import ProgramService


class SegmentText(Protocol):
    """Text of a trace segment that the served tokenizer turns into exactly ``tokens``."""

    def text(self, key: str, tokens: int) -> str: ...


@dataclass(frozen=True, slots=True)
class ReplayedProgram:
    """One program's end: its trace, E2E seconds, whether it finished, the prompt and cached
    tokens of its calls (as the engine counted them), and whether the trace's own cancel
    ended it (``cancel_at_s`` came first: no failure of the serving)."""

    trace: TraceProgram
    e2e_s: float
    success: bool
    prompt_tokens: int
    cached_tokens: int
    cancelled: bool = False


class ServiceReplay:
    """Plays ``programs`` through ``service`` (its runtime started) once."""

    def __init__(
        self, service: ProgramService, programs: list[TraceProgram], book: SegmentText
    ) -> None:
        self.service = service
        self.programs = programs
        self.book = book

    async def run(self) -> list[ReplayedProgram]:
        """Replay every program; one result per program, in trace order."""
        t0 = time.time()
        return list(await asyncio.gather(*(self._program(p, t0) for p in self.programs)))

    async def _program(self, trace: TraceProgram, t0: float) -> ReplayedProgram:
        await asyncio.sleep(max(t0 + trace.arrival_s - time.time(), 0.0))
        start = time.time()
        self.service.open_program(
            trace.tenant,
            trace.id,
            deadline_s=trace.deadline_s,
            labels={"workload": trace.shape},
        )
        usage = [0, 0]  # prompt tokens, cached tokens
        tasks: dict[str, asyncio.Task[bool]] = {}
        for node in trace.nodes:  # listed parents-first
            parents = [tasks[p] for p in node.parents]
            tasks[node.id] = asyncio.create_task(self._node(trace, node, parents, usage))
        needed = [tasks[n.id] for n in trace.nodes if n.branch is not TraceBranch.DISCARDED]
        waiter = asyncio.gather(*needed)
        ok = False
        cancelled = False
        try:
            if trace.cancel_at_s is None:
                ok = all(await waiter)
            else:
                done, _ = await asyncio.wait({waiter}, timeout=trace.cancel_at_s)
                cancelled = not done
                ok = bool(done) and all(waiter.result())
        except ServiceError:
            ok = False
        finally:
            for task in tasks.values():  # discarded branches still running, or a cancel
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            if not waiter.done() or cancelled:
                with contextlib.suppress(asyncio.CancelledError, ServiceError):
                    await waiter
        if cancelled:
            await self.service.cancel_program(trace.tenant, trace.id)
        else:
            self.service.finish_program(trace.tenant, trace.id, success=ok)
        e2e = time.time() - start
        return ReplayedProgram(trace, e2e, ok and not cancelled, usage[0], usage[1], cancelled)

    async def _node(
        self,
        trace: TraceProgram,
        node: TraceNode,
        parents: list[asyncio.Task[bool]],
        usage: list[int],
    ) -> bool:
        if parents and not all(await asyncio.gather(*parents)):
            return False
        if isinstance(node, ToolNode):
            return await self._tool(trace, node)
        return await self._llm(trace, node, usage)

    async def _llm(self, trace: TraceProgram, node: LLMNode, usage: list[int]) -> bool:
        prompt = "".join(self.book.text(s.key, s.tokens) for s in context_segments(trace, node.id))
        chat = ChatCall(
            messages=[{"role": "user", "content": ""}],
            max_tokens=node.output_tokens,
            program_id=trace.id,
            node_id=node.id,
            parent_ids=node.parents,
            ignore_eos=True,
            prompt_text=prompt,
        )
        call = await self.service.start_call(trace.tenant, chat)
        outcome = await call.outcome()
        if outcome.result is not None:
            usage[0] += outcome.result.prompt_tokens
            usage[1] += outcome.result.cached_tokens
        return outcome.finish_reason not in ("abort", "error")

    async def _tool(self, trace: TraceProgram, node: ToolNode) -> bool:
        tools = self.service.tools
        spec = ToolSpec(
            node.tool, ToolKind(node.tool_kind.value), node.side_effect, node.idempotent
        )
        for k, attempt in enumerate(node.attempts):
            node_id = node.id if k == 0 else f"{node.id}#{k}"
            await tools.ensure_tool_node(trace.tenant, trace.id, node_id, spec)
            await tools.tool_started(trace.id, node_id)
            await asyncio.sleep(attempt.latency_s)
            await tools.tool_finished(
                trace.id, node_id, attempt.outcome.value, latency_s=attempt.latency_s
            )
            if attempt.outcome is Outcome.OK:
                return True
        return True  # the agent takes the last failure and goes on, as the trace records
