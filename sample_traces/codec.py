"""JSONL reading and writing of traces: one program per line, errors naming line and field.

:func:`parse_program` turns one decoded line into a :class:`TraceProgram` (type and key checks
here, value and DAG checks in the dataclasses); :func:`program_to_dict` is its inverse.
:func:`load_trace` also checks what spans lines (:func:`validate_trace`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentconsole.sample_traces.errors import TraceError
from agentconsole.sample_traces.format import (
    QUOTA_FIELDS,
    TRACE_TOOL_KINDS,
    Branch,
    Insert,
    LLMNode,
    NodeKind,
    Outcome,
    PrefixSegment,
    Quotas,
    ToolAttempt,
    ToolKind,
    ToolNode,
    TraceNode,
    TraceProgram,
)
from agentconsole.sample_traces.jsonfields import JsonObject, nested, string_item


@nested
def _prefix(o: JsonObject) -> PrefixSegment:
    return PrefixSegment(
        id=o.string("id"), tokens=o.integer("tokens"), public=o.boolean("public", False)
    )


@nested
def _attempt(o: JsonObject) -> ToolAttempt:
    return ToolAttempt(latency_s=o.number("latency_s"), outcome=o.enum("outcome", Outcome))


@nested
def _insert(o: JsonObject) -> Insert:
    return Insert(after=o.string("after"), tokens=o.integer("tokens"))


@nested
def _node(o: JsonObject) -> TraceNode:
    kind = o.enum("kind", NodeKind)
    node_id = o.string("id")
    parents = tuple(o.items("parents", string_item, default=True))
    branch = o.enum("branch", Branch, Branch.MAIN)
    if kind is NodeKind.LLM:
        return LLMNode(
            id=node_id,
            parents=parents,
            branch=branch,
            prompt_tokens=o.integer("prompt_tokens"),
            output_tokens=o.integer("output_tokens"),
            max_tokens=o.opt_integer("max_tokens"),
            model=o.opt_string("model"),
            role=o.opt_string("role"),
            candidates=tuple(o.items("candidates", string_item, default=True)),
            compact=o.boolean("compact", False),
            insert=None if (raw := o.get("insert", True)) is None else _insert(raw, "insert"),
        )
    return ToolNode(
        id=node_id,
        parents=parents,
        branch=branch,
        tool=o.string("tool"),
        tool_kind=o.enum("tool_kind", ToolKind, allowed=TRACE_TOOL_KINDS),
        side_effect=o.boolean("side_effect", False),
        idempotent=o.boolean("idempotent", True),
        timeout_s=o.number("timeout_s"),
        result_tokens=o.integer("result_tokens"),
        attempts=tuple(o.items("attempts", _attempt)),
    )


def _quotas(o: JsonObject) -> Quotas:
    values: dict[str, Any] = {
        attr: o.opt_number(name) if seconds else o.opt_integer(name)
        for name, attr, seconds in QUOTA_FIELDS
    }
    return Quotas(**values)


def parse_program(data: object, *, line: int | None = None) -> TraceProgram:
    """Build a program from one decoded JSON line; raises :class:`TraceError` naming the field.

    Optional fields may be absent or ``null``; unknown fields are rejected. ``line`` (1-based)
    is only used in error messages.
    """
    try:
        o = JsonObject(data)
        raw_quotas = o.get("quotas", True)
        program = TraceProgram(
            id=o.string("id"),
            tenant=o.string("tenant"),
            workload=o.string("workload"),
            shape=o.string("shape"),
            arrival_s=o.number("arrival_s"),
            deadline_s=o.opt_number("deadline_s"),
            cancel_at_s=o.opt_number("cancel_at_s"),
            prefix=tuple(o.items("prefix", _prefix, default=True)),
            quotas=None if raw_quotas is None else nested(_quotas)(raw_quotas, "quotas"),
            nodes=tuple(o.items("nodes", _node)),
        )
        o.done()
    except TraceError as err:
        raise (err if line is None else err.at_line(line)) from None
    return program


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _node_dict(node: TraceNode) -> dict[str, Any]:
    head: dict[str, Any] = {
        "id": node.id,
        "kind": node.kind.value,
        "parents": list(node.parents),
        "branch": node.branch.value,
    }
    if isinstance(node, LLMNode):
        tail: dict[str, Any] = {
            "prompt_tokens": node.prompt_tokens,
            "output_tokens": node.output_tokens,
            "max_tokens": node.max_tokens,
            "model": node.model,
            "role": node.role,
            "candidates": list(node.candidates) or None,  # written only when set
            "compact": True if node.compact else None,  # written only when set
            "insert": None
            if node.insert is None
            else {"after": node.insert.after, "tokens": node.insert.tokens},
        }
    else:
        tail = {
            "tool": node.tool,
            "tool_kind": node.tool_kind.value,
            "side_effect": node.side_effect,
            "idempotent": node.idempotent,
            "timeout_s": node.timeout_s,
            "result_tokens": node.result_tokens,
            "attempts": [
                {"latency_s": a.latency_s, "outcome": a.outcome.value} for a in node.attempts
            ],
        }
    return _drop_none(head | tail)


def program_to_dict(program: TraceProgram) -> dict[str, Any]:
    """The JSON-ready form of ``program`` (the inverse of :func:`parse_program`); omits ``None``."""
    q = program.quotas
    quotas = None
    if q is not None:
        quotas = _drop_none({name: getattr(q, attr) for name, attr, _ in QUOTA_FIELDS})
    return _drop_none(
        {
            "id": program.id,
            "tenant": program.tenant,
            "workload": program.workload,
            "shape": program.shape,
            "arrival_s": program.arrival_s,
            "deadline_s": program.deadline_s,
            "cancel_at_s": program.cancel_at_s,
            "prefix": [
                {"id": p.id, "tokens": p.tokens, "public": p.public} for p in program.prefix
            ],
            "quotas": quotas,
            "nodes": [_node_dict(n) for n in program.nodes],
        }
    )


def dumps_program(program: TraceProgram) -> str:
    """One compact JSON line (no newline) for ``program``."""
    return json.dumps(program_to_dict(program), separators=(",", ":"))


def validate_trace(programs: Sequence[TraceProgram]) -> None:
    """Check what spans programs; raises :class:`TraceError` naming the (1-based) line.

    Program ids are unique; a prefix id always has the same tokens and ``public`` flag; a
    private prefix belongs to one tenant only (sharing it would leak across tenants).
    """
    ids: set[str] = set()
    prefixes: dict[str, tuple[PrefixSegment, str]] = {}
    for line, program in enumerate(programs, start=1):
        if program.id in ids:
            raise TraceError(f"duplicate program id {program.id!r}", field="id", line=line)
        ids.add(program.id)
        for i, seg in enumerate(program.prefix):
            first = prefixes.setdefault(seg.id, (seg, program.tenant))
            if first[0] != seg:
                raise TraceError(
                    f"prefix {seg.id!r} differs from its first use {first[0]}",
                    field=f"prefix[{i}]",
                    line=line,
                )
            if not seg.public and first[1] != program.tenant:
                raise TraceError(
                    f"private prefix {seg.id!r} is used by tenants {first[1]!r} and "
                    f"{program.tenant!r}; mark it public or give each tenant its own",
                    field=f"prefix[{i}].public",
                    line=line,
                )


def loads_trace(text: str) -> list[TraceProgram]:
    """Parse JSONL text (blank lines are skipped) and :func:`validate_trace` the result."""
    programs: list[TraceProgram] = []
    lines: list[int] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as err:
            raise TraceError(f"invalid JSON: {err.msg} (column {err.colno})", line=number) from None
        programs.append(parse_program(data, line=number))
        lines.append(number)
    try:
        validate_trace(programs)
    except TraceError as err:
        # validate_trace counts programs; report the file's line instead.
        raise TraceError(err.message, field=err.field, line=lines[(err.line or 1) - 1]) from None
    return programs


def load_trace(path: str | Path) -> list[TraceProgram]:
    """Read a JSONL trace file; raises :class:`TraceError` naming the line and field (or
    the line of the first byte that is not UTF-8), ``OSError`` when it cannot be read."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TraceError(f"not UTF-8 text (byte {err.start} of the file)", line=line) from None
    return loads_trace(text)


def dump_trace(programs: Iterable[TraceProgram], path: str | Path) -> None:
    """Write ``programs`` to ``path``, one line each (overwrites; ends with a newline)."""
    Path(path).write_text("".join(dumps_program(p) + "\n" for p in programs), encoding="utf-8")
