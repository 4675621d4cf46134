"""A trace program as the simulator plays it: its progress, its prompts, its program nodes.

Everything here is computed from the trace alone, once per program, when it arrives: the
scheduler still sees a node only when it is revealed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from itertools import takewhile

from agentconsole.kvtiers.node import Block, Node
from agentconsole.sample_traces.format import (
    LLMNode,
    Segment,
    ToolNode,
    TraceProgram,
    context_segments,
)
from agentconsole.scheduler.program import Branch, NodeKind, RetryPolicy, ToolSpec
from agentconsole.scheduler.program import Node as ProgramNode
from agentconsole.server.runtime.sim.costmodel import CostModel


def segment(key: str, tokens: int) -> list[Block]:
    """A private segment as a (possibly empty) block list: zero-token segments are skipped."""
    return [Block(key, tokens)] if tokens > 0 else []


def shared_across_tenants(segments: Iterable[Segment]) -> bool:
    """Whether a call of these prompt segments shares its public ones across tenants: only a
    prompt public as a whole does. SGLang 0.5.23 puts the tenant's ``cache_salt`` into every
    radix key of a request whose prompt is not all public (``sglang/wire.py``,
    ``cache_salt``), so ``serve`` keeps a platform prefix once per tenant; ``bench`` keys it
    the same way rather than share what serve cannot."""
    return all(s.public for s in segments if s.tokens)


def tenant_scoped(blocks: list[Block]) -> list[Block]:
    """A call's prompt ``blocks`` as the engine caches them: its leading public blocks made
    the tenant's own unless every block is public (:func:`shared_across_tenants`). Public
    blocks lead a prompt (the index salts everything after its first private block anyway),
    so a prompt whose first block is private is returned as it is, in O(1)."""
    if not blocks or not blocks[0].public or all(b.public for b in blocks):
        return blocks
    return [Block(b.key, b.tokens) if b.public else b for b in blocks]


@dataclass(slots=True, eq=False)
class ProgramRun:
    """One program being played: which nodes wait on parents, what runs, where its KV is."""

    trace: TraceProgram
    waiting_parents: list[int]
    children: list[list[int]]
    needed: int  # non-discarded nodes still to finish
    llm_calls: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (node, engine)
    tools: dict[int, int] = field(default_factory=dict)  # node index -> attempt index
    engine: int | None = None  # replica that ran its last call (where its context lives)
    contexts: dict[str, list[Block]] = field(default_factory=dict)  # LLM node -> its prompt
    #: LLM node -> the position in its prompt of the tokens it inserted mid-prompt
    inserts: dict[str, int] = field(default_factory=dict)
    #: the context of its last finished call, as the engine cached it (tool-wait decisions)
    last_path: list[Node] = field(default_factory=list)
    #: LLM calls held at a call boundary while the door parks the program
    held: list[tuple[int, LLMNode]] = field(default_factory=list)
    ended: bool = False

    @classmethod
    def of(cls, program: TraceProgram) -> ProgramRun:
        """A run with no node started; its roots are the nodes with no waiting parents."""
        index = {n.id: i for i, n in enumerate(program.nodes)}
        waiting = [len(n.parents) for n in program.nodes]
        children: list[list[int]] = [[] for _ in program.nodes]
        for i, node in enumerate(program.nodes):
            for parent in node.parents:
                children[index[parent]].append(i)
        needed = sum(1 for n in program.nodes if n.branch is not Branch.DISCARDED)
        return cls(program, waiting, children, needed)

    def first_context(self) -> list[Block]:
        """The prompt blocks of the program's first call (what the door sizes it by, with what
        the engines hold of them); empty when it makes no call. Needs ``contexts`` built."""
        for node in self.trace.nodes:
            if isinstance(node, LLMNode):
                return self.contexts[node.id]
        return []


def build_contexts(run: ProgramRun, cost: CostModel, chunked_prefill_size: int) -> float:
    """Fill ``run.contexts`` with every LLM node's prompt blocks, and return the program's E2E
    alone on a warm engine: the denominator of its slowdown. Warm: the engine holds the prefix
    segments the program shares with others (the platform's, its tenant's: the leading ones
    not keyed by its id), not its own (its task context: no engine holds it when it arrives).
    One pass over the DAG in listing (topological) order. The program ends when its needed
    nodes end (``ProgramRun.needed``), so a discarded branch that would run longer does not
    count."""
    program = run.trace
    mine = f"{program.id}/"
    shared = takewhile(lambda p: not p.id.startswith(mine), program.prefix)
    # a block is cached when it was seen right after the same block (a prefix-tree edge), so a
    # summary or report re-read at a new place in a compacted context is prefilled again
    seen = set(_edges([Block(p.id, p.tokens, p.public) for p in shared if p.tokens]))
    finish: dict[str, float] = {}
    through: dict[str, list[Block]] = {}  # context a node's children inherit
    for node in program.nodes:
        start = max((finish[p] for p in node.parents), default=0.0)
        if isinstance(node, ToolNode):
            finish[node.id] = start + node.duration_s
            if len(node.parents) == 1 and node.parents[0] in through:
                result = segment(f"{program.id}/{node.id}/result", node.result_tokens)
                through[node.id] = through[node.parents[0]] + result
            continue
        segments = _context(program, node, through)
        run.contexts[node.id] = segments
        if node.insert is not None:
            key = f"{program.id}/{node.id}/insert"
            run.inserts[node.id] = next(k for k, b in enumerate(segments) if b.key == key)
        through[node.id] = segments + segment(f"{program.id}/{node.id}/out", node.output_tokens)
        edges = _edges(through[node.id])
        total = sum(s.tokens for s in segments)
        new = sum(s.tokens for s, edge in zip(segments, edges, strict=False) if edge not in seen)
        seen.update(edges)
        took = cost.prefill_seconds(max(new, 1), total - new, chunked_prefill_size)
        took += cost.decode_steps_seconds(1, total + 1, node.output_tokens - 1)
        finish[node.id] = start + took + cost.efficiency.call_overhead_s
    return max(
        (finish[n.id] for n in program.nodes if n.branch is not Branch.DISCARDED), default=0.0
    )


def _edges(blocks: list[Block]) -> list[tuple[Hashable | None, Hashable]]:
    """Each block's key with the key before it: the prefix-tree edge that reaches it."""
    keys = [b.key for b in blocks]
    return list(zip([None, *keys], keys, strict=False))


def _context(program: TraceProgram, node: LLMNode, through: dict[str, list[Block]]) -> list[Block]:
    """The node's prompt blocks (the trace's context rule). Along a chain a child's context is
    its parent's plus the parent's own segments, so it is built from the parent's in O(1);
    joins, roots, compact calls (a fresh context) and inserting calls (tokens placed inside
    it) take the general rule."""
    own = segment(f"{program.id}/{node.id}/prompt", node.prompt_tokens)
    chain = len(node.parents) == 1 and node.parents[0] in through
    if chain and not node.compact and node.insert is None:
        return tenant_scoped(through[node.parents[0]] + own)
    segments = context_segments(program, node.id)
    return tenant_scoped([Block(s.key, s.tokens, s.public) for s in segments if s.tokens])


def program_node(program_id: str, node: LLMNode | ToolNode) -> ProgramNode:
    """The scheduler's view of a trace node (no recorded latency or outcome in it)."""
    if isinstance(node, ToolNode):
        spec = ToolSpec(
            node.tool, node.tool_kind, node.side_effect, node.idempotent, node.timeout_s
        )
        return ProgramNode(
            node.id,
            program_id,
            NodeKind.TOOL,
            node.parents,
            tool=spec,
            branch=node.branch,
            retry=RetryPolicy(max(len(node.attempts), 1)),
        )
    return ProgramNode(
        node.id,
        program_id,
        NodeKind.LLM,
        node.parents,
        branch=node.branch,
        model_candidates=(node.model,) if node.model else (),
    )
