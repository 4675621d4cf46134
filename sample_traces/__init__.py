"""Agent workloads as data (JSONL + schema) and their generator.

The format (:mod:`.format`, :mod:`.codec`) is re-exported here; the generator's entry points
are :func:`generate` and :func:`available_workloads` (CLI: ``python -m
agentconsole.sample_traces.generator``). ``sample_traces/README.md`` documents the format.
"""

from agentconsole.sample_traces.codec import (
    dump_trace,
    dumps_program,
    load_trace,
    loads_trace,
    parse_program,
    program_to_dict,
    validate_trace,
)
from agentconsole.sample_traces.errors import TraceError
from agentconsole.sample_traces.format import (
    Branch,
    Insert,
    LLMNode,
    NodeKind,
    Outcome,
    PrefixSegment,
    Quotas,
    Segment,
    ToolAttempt,
    ToolKind,
    ToolNode,
    TraceNode,
    TraceProgram,
    context_segments,
    context_tokens,
    inserted_segment,
    node_segments,
)
from agentconsole.sample_traces.nominal import nominal_duration_s
from agentconsole.sample_traces.registry import WORKLOADS, Workload, available_workloads, generate
from agentconsole.sample_traces.schema import load_schema

__all__ = [
    "WORKLOADS",
    "Branch",
    "Insert",
    "LLMNode",
    "NodeKind",
    "Outcome",
    "PrefixSegment",
    "Quotas",
    "Segment",
    "ToolAttempt",
    "ToolKind",
    "ToolNode",
    "TraceError",
    "TraceNode",
    "TraceProgram",
    "Workload",
    "available_workloads",
    "context_segments",
    "context_tokens",
    "dump_trace",
    "dumps_program",
    "generate",
    "inserted_segment",
    "load_schema",
    "load_trace",
    "loads_trace",
    "node_segments",
    "nominal_duration_s",
    "parse_program",
    "program_to_dict",
    "validate_trace",
]
