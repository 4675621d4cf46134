"""A hardware-free estimate of how long a program lives, used to place deadlines and cancels.

The estimate is the critical path of the DAG when every LLM call runs alone at nominal speeds
(new input tokens at ``PREFILL_TPS``, output at ``DECODE_TPS``; the prefix counts as cached) and
every tool takes its recorded attempts. It is a yardstick for trace generation, not a
prediction of any scheduler's result.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentconsole.sample_traces.format import LLMNode, TraceNode, TraceProgram

PREFILL_TPS = 8000.0
DECODE_TPS = 40.0


def node_nominal_s(node: TraceNode) -> float:
    """Nominal seconds of one node; a tool also pays the prefill of its result, an inserting
    call that of its inserted tokens (the context after them counts as cached, as the prefix)."""
    if isinstance(node, LLMNode):
        new = node.prompt_tokens + (node.insert.tokens if node.insert is not None else 0)
        return new / PREFILL_TPS + node.output_tokens / DECODE_TPS
    return node.duration_s + node.result_tokens / PREFILL_TPS


def critical_path_s(nodes: Sequence[TraceNode]) -> float:
    """Longest nominal path through ``nodes``, which must be listed parents-first."""
    finish: dict[str, float] = {}
    for node in nodes:
        start = max((finish[p] for p in node.parents), default=0.0)
        finish[node.id] = start + node_nominal_s(node)
    return max(finish.values(), default=0.0)


def nominal_duration_s(program: TraceProgram) -> float:
    """Nominal life of ``program`` from arrival to its last node."""
    return critical_path_s(program.nodes)
