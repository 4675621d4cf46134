"""Recorded programs rebuilt as trace programs (``sample_traces`` format) for a what-if replay.

What is kept: each program's arrival (from the window's start), DAG (node parents, branches),
deadline and cancel time; each LLM call's prompt and output tokens; each tool's attempts
(latency, outcome), side effects; prefix segments shared between programs (:mod:`prefixes`).

How the recording maps onto the trace's context rule: an LLM node's ``prompt_tokens`` is what
its recorded prompt adds to the context the rule gives it (prefix + ancestors' prompts,
outputs and results); when the recorded prompt is shorter than that context (the agent dropped
history), the node becomes ``compact`` (a fresh context: prefix + its parents' last segments).
Tool results are left at 0 tokens: the store knows the next prompt's size, not which part of
it a tool's result was, and a replay prefills both the same way (at the next call).

Agent time is folded into tool latencies so a replay keeps the recorded pace: a tool's first
attempt counts from its parents' end (the agent's time to start it), and an LLM call's wait for
its agent after its tool parents end is added to those tools' last attempts. Time an agent
spends between two LLM calls with no tool between them is not in the trace (its format has no
place for it). Nodes that never ran (a cancelled program's pending work) are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from agentconsole.sample_traces import (
    Branch,
    LLMNode,
    Outcome,
    PrefixSegment,
    ToolAttempt,
    ToolNode,
    TraceProgram,
    context_tokens,
)
from agentconsole.scheduler.program import ToolKind
from agentconsole.server.whatif.prefixes import ProgramChains, common_blocks, shared_prefixes
from agentconsole.server.whatif.recording import RecordedNode, RecordedProgram

TraceNode = LLMNode | ToolNode
MIN_LATENCY_S = 0.001
DEFAULT_TIMEOUT_S = 10.0
#: tool name fragments -> latency class (a trace's tool kind is never ``other``)
KIND_HINTS = (
    ("test", ToolKind.TEST_RUN),
    ("search", ToolKind.SEARCH),
    ("grep", ToolKind.SEARCH),
    ("brows", ToolKind.BROWSER),
    ("sql", ToolKind.DATABASE),
    ("db", ToolKind.DATABASE),
    ("http", ToolKind.HTTP),
    ("fetch", ToolKind.HTTP),
    ("file", ToolKind.FILE),
    ("patch", ToolKind.FILE),
)
OUTCOMES = {"ok": Outcome.OK, "timeout": Outcome.TIMEOUT}


def tool_kind(name: str) -> ToolKind:
    """The latency class a tool's name suggests (``code_exec`` when none does)."""
    lowered = name.lower()
    return next((kind for hint, kind in KIND_HINTS if hint in lowered), ToolKind.CODE_EXEC)


def _ran(nodes: Iterable[RecordedNode]) -> list[RecordedNode]:
    """Nodes that ran (an attempt that started), parents-first, without orphans."""
    kept: dict[str, RecordedNode] = {}
    pending = [n for n in nodes if n.attempts]
    while pending:  # creation order is parents-first but for nodes added out of order
        progress = False
        for node in list(pending):
            if all(p in kept for p in node.parents):
                kept[node.node_id] = node
                pending.remove(node)
                progress = True
        if not progress:
            break  # the rest depend on nodes that never ran
    return list(kept.values())


def _end(node: RecordedNode) -> float:
    return node.finished_at or node.attempts[-1].finished_at or node.attempts[-1].started_at


def _tool(node: RecordedNode, start_gap: float, end_gap: float) -> ToolNode:
    attempts = []
    last = len(node.attempts) - 1
    for i, attempt in enumerate(node.attempts):
        end = attempt.finished_at if attempt.finished_at is not None else _end(node)
        latency = end - attempt.started_at + (start_gap if i == 0 else 0.0)
        latency += end_gap if i == last else 0.0
        outcome = OUTCOMES.get(attempt.state, Outcome.FAIL)
        attempts.append(ToolAttempt(latency_s=max(latency, MIN_LATENCY_S), outcome=outcome))
    timed_out = [a.latency_s for a in attempts if a.outcome is Outcome.TIMEOUT]
    timeout = (
        max(timed_out) if timed_out else max(DEFAULT_TIMEOUT_S, *(a.latency_s for a in attempts))
    )
    attempts = [
        replace(a, latency_s=timeout) if a.outcome is Outcome.TIMEOUT else a for a in attempts
    ]
    name = node.tool or "tool"
    return ToolNode(
        id=node.node_id, parents=node.parents, branch=Branch(node.branch), tool=name,
        tool_kind=tool_kind(name), side_effect=node.side_effect, idempotent=node.idempotent,
        timeout_s=timeout, result_tokens=0, attempts=tuple(attempts),
    )  # fmt: skip


def _llm(
    program: TraceProgram, built: list[TraceNode], node: RecordedNode
) -> tuple[LLMNode, TraceProgram]:
    """The LLM node whose context plus own prompt is the recorded prompt (compact when the
    plain rule's context is already longer), and the program with it."""
    base = LLMNode(
        id=node.node_id, parents=node.parents, branch=Branch(node.branch), prompt_tokens=0,
        output_tokens=max(node.output_tokens, 1),
        max_tokens=max(node.max_tokens, node.output_tokens, 1) if node.max_tokens else None,
    )  # fmt: skip
    for compact in (False, True):
        trial = replace(base, compact=compact)
        with_node = replace(program, nodes=(*built, trial))
        extra = node.prompt_tokens - context_tokens(with_node, node.node_id)
        if extra >= 0 or compact:
            final = replace(trial, prompt_tokens=max(extra, 0))
            return final, replace(program, nodes=(*built, final))
    raise AssertionError("unreachable")


def _program(
    recorded: RecordedProgram, start: float, prefix: Sequence[PrefixSegment]
) -> TraceProgram | None:
    ran = _ran(recorded.nodes)
    if not ran:
        return None
    by_id = {n.node_id: n for n in ran}
    children_llm_gap: dict[str, float] = {}
    for node in ran:  # an LLM call's wait for its agent after its tool parents ended
        tools = [by_id[p] for p in node.parents if by_id[p].kind == "tool"]
        if node.kind == "llm" and tools:
            gap = max(node.created_at - max(_end(t) for t in tools), 0.0)
            for tool in tools:
                children_llm_gap[tool.node_id] = max(children_llm_gap.get(tool.node_id, 0.0), gap)
    built: list[TraceNode] = []
    program = TraceProgram(
        id=recorded.program_id,
        tenant=recorded.tenant,
        workload="recorded",
        shape=recorded.labels.get("shape") or "recorded",
        arrival_s=max(recorded.created_at - start, 0.0),
        prefix=tuple(prefix),
        nodes=(LLMNode(id="placeholder", prompt_tokens=0, output_tokens=1),),
        deadline_s=_after(recorded.deadline, recorded.created_at, positive=True),
        cancel_at_s=_after(recorded.finished_at, recorded.created_at)
        if recorded.state == "cancelled"
        else None,
    )
    for node in ran:
        if node.kind == "llm":
            llm, program = _llm(program, built, node)
            built.append(llm)
            continue
        parents_end = max((_end(by_id[p]) for p in node.parents), default=node.created_at)
        start_gap = max(node.attempts[0].started_at - parents_end, 0.0) if node.parents else 0.0
        built.append(_tool(node, start_gap, children_llm_gap.get(node.node_id, 0.0)))
    return replace(program, nodes=tuple(built))


def _after(when: float | None, since: float, *, positive: bool = False) -> float | None:
    if when is None:
        return None
    delta = when - since
    return None if delta < 0 or (positive and delta <= 0) else delta


def _chains(recorded: RecordedProgram) -> ProgramChains:
    calls = [n for n in recorded.nodes if n.kind == "llm" and n.attempts]
    first = calls[0].blocks if calls else ()
    limit = min((common_blocks(first, c.blocks) for c in calls), default=0)
    size = calls[0].block_tokens if calls else 0
    return ProgramChains(recorded.program_id, recorded.tenant, first, limit, size)


def rebuild_trace(
    recorded: Sequence[RecordedProgram], window_start: float | None = None
) -> list[TraceProgram]:
    """Trace programs of ``recorded`` (arrival order), arrivals relative to ``window_start``
    (default: the first arrival). Programs of which nothing ran are left out."""
    if not recorded:
        return []
    start = min(p.created_at for p in recorded) if window_start is None else window_start
    prefixes = shared_prefixes([_chains(p) for p in recorded])
    out = []
    for program in sorted(recorded, key=lambda p: (p.created_at, p.program_id)):
        rebuilt = _program(program, start, prefixes.get(program.program_id, ()))
        if rebuilt is not None:
            out.append(rebuilt)
    return out
