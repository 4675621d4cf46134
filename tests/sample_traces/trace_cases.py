"""Test data shared by the trace tests: a hand-written program and mutations that break it.

Not a test module: ``conftest.py`` and the tests import it by name (pytest puts this folder on
``sys.path``; the tests folders are not packages).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agentconsole.sample_traces import (
    Insert,
    LLMNode,
    PrefixSegment,
    ToolAttempt,
    ToolKind,
    ToolNode,
    TraceProgram,
)
from agentconsole.sample_traces.format import Outcome

Mutator = Callable[[dict[str, Any]], None]


def tool_node(node_id: str, parent: str, result: int) -> ToolNode:
    """A quick ``read_file`` tool call after ``parent`` that returns ``result`` tokens."""
    return ToolNode(
        id=node_id,
        parents=(parent,),
        tool="read_file",
        tool_kind=ToolKind.FILE,
        timeout_s=30.0,
        result_tokens=result,
        attempts=(ToolAttempt(latency_s=0.1, outcome=Outcome.OK),),
    )


def inserting_chain(
    *, after: str | None = "t/repo", tokens: int = 800, compact_last: bool = False
) -> TraceProgram:
    """Program ``p`` of tenant ``t``: ``a`` (5,000-token prompt, 200 out) -> ``r1`` (3,000)
    -> ``b`` (20 in, 100 out; inserts ``tokens`` after the prefix segment ``after``, none for
    ``None``) -> ``r2`` (1,000) -> ``c`` (10 in, 50 out), on prefix ``platform/sys`` (2,000,
    public) + ``t/repo`` (10,000)."""
    insert = None if after is None else Insert(after=after, tokens=tokens)
    return TraceProgram(
        id="p",
        tenant="t",
        workload="w",
        shape="serial",
        arrival_s=0.0,
        prefix=(
            PrefixSegment(id="platform/sys", tokens=2_000, public=True),
            PrefixSegment(id="t/repo", tokens=10_000),
        ),
        nodes=(
            LLMNode(id="a", prompt_tokens=5_000, output_tokens=200),
            tool_node("r1", "a", 3_000),
            LLMNode(id="b", parents=("r1",), prompt_tokens=20, output_tokens=100, insert=insert),
            tool_node("r2", "b", 1_000),
            LLMNode(
                id="c", parents=("r2",), prompt_tokens=10, output_tokens=50, compact=compact_last
            ),
        ),
    )


def handmade() -> dict[str, Any]:
    """plan -> {s1 (timeout, retry), s2} -> join -> test (fail) -> fix (repair) -> done; plus
    a discarded speculative call hanging off join."""
    return {
        "id": "p1",
        "tenant": "tenant-a",
        "workload": "handmade",
        "shape": "repair",
        "arrival_s": 1.5,
        "deadline_s": 60.0,
        "cancel_at_s": 30.0,
        "prefix": [
            {"id": "platform/sys", "tokens": 80_000, "public": True},
            {"id": "tenant-a/profile", "tokens": 2_000, "public": False},
        ],
        "quotas": {"max_total_tokens": 500_000, "max_tool_calls": 20, "max_wall_s": 600.0},
        "nodes": [
            {
                "id": "plan",
                "kind": "llm",
                "prompt_tokens": 500,
                "output_tokens": 200,
                "max_tokens": 1024,
                "model": "big",
            },
            {
                "id": "s1",
                "kind": "tool",
                "parents": ["plan"],
                "tool": "web_search",
                "tool_kind": "search",
                "timeout_s": 5.0,
                "result_tokens": 1_000,
                "attempts": [
                    {"latency_s": 5.0, "outcome": "timeout"},
                    {"latency_s": 0.4, "outcome": "ok"},
                ],
            },
            {
                "id": "s2",
                "kind": "tool",
                "parents": ["plan"],
                "tool": "sql_query",
                "tool_kind": "database",
                "timeout_s": 5.0,
                "result_tokens": 700,
                "attempts": [{"latency_s": 0.3, "outcome": "ok"}],
            },
            {
                "id": "join",
                "kind": "llm",
                "parents": ["s1", "s2"],
                "prompt_tokens": 40,
                "output_tokens": 250,
            },
            {
                "id": "test",
                "kind": "tool",
                "parents": ["join"],
                "tool": "run_tests",
                "tool_kind": "test_run",
                "side_effect": False,
                "idempotent": True,
                "timeout_s": 10.0,
                "result_tokens": 1_500,
                "attempts": [{"latency_s": 4.0, "outcome": "fail"}],
            },
            {
                "id": "fix",
                "kind": "llm",
                "parents": ["test"],
                "branch": "repair",
                "prompt_tokens": 150,
                "output_tokens": 300,
            },
            {
                "id": "spec",
                "kind": "llm",
                "parents": ["join"],
                "branch": "discarded",
                "prompt_tokens": 30,
                "output_tokens": 80,
            },
            {
                "id": "done",
                "kind": "llm",
                "parents": ["fix"],
                "prompt_tokens": 20,
                "output_tokens": 60,
            },
        ],
    }


def _set(path: str, value: Any) -> Mutator:
    """Set a dotted/indexed path like ``nodes.1.attempts.0.latency_s`` to ``value``."""

    def run(d: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target: Any = d
        for key in parents:
            target = target[key]
        target[last] = value

    return run


def _delete(path: str) -> Mutator:
    def run(d: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target: Any = d
        for key in parents:
            target = target[key]
        del target[last]

    return run


def _append_node(node: dict[str, Any]) -> Mutator:
    return lambda d: d["nodes"].append(node)


def _move_node(src: int, dst: int) -> Mutator:
    return lambda d: d["nodes"].insert(dst, d["nodes"].pop(src))


# (mutation, field the error must name, words the message must contain, schema can tell)
BAD: dict[str, tuple[Mutator, str, str, bool]] = {
    "unknown parent": (
        _set("nodes.3.parents", ["s1", "nope"]),
        "nodes[3].parents",
        "unknown parent 'nope'",
        False,
    ),
    "cycle": (_set("nodes.0.parents", ["done"]), "nodes[0].parents", "cycle", False),
    "self loop": (_set("nodes.1.parents", ["s1"]), "nodes[1].parents", "cycle 's1' -> 's1'", False),
    "parent listed later": (_move_node(3, 2), "nodes[2].parents", "listed after", False),
    "repeated parent": (
        _set("nodes.3.parents", ["s1", "s1"]),
        "nodes[3].parents",
        "listed twice",
        True,
    ),
    "duplicate node id": (_set("nodes.2.id", "s1"), "nodes[2].id", "duplicate node id", False),
    "negative prompt tokens": (
        _set("nodes.0.prompt_tokens", -5),
        "nodes[0].prompt_tokens",
        ">= 0",
        True,
    ),
    "zero output tokens": (
        _set("nodes.0.output_tokens", 0),
        "nodes[0].output_tokens",
        ">= 1",
        True,
    ),
    "max tokens below the output": (
        _set("nodes.0.max_tokens", 199),
        "nodes[0].max_tokens",
        "at least output_tokens (200)",
        False,
    ),
    "zero max tokens": (_set("nodes.0.max_tokens", 0), "nodes[0].max_tokens", "at least", True),
    "negative result tokens": (
        _set("nodes.1.result_tokens", -1),
        "nodes[1].result_tokens",
        ">= 0",
        True,
    ),
    "negative prefix tokens": (_set("prefix.0.tokens", -1), "prefix[0].tokens", ">= 0", True),
    "negative arrival": (_set("arrival_s", -0.1), "arrival_s", ">= 0", True),
    "zero deadline": (_set("deadline_s", 0), "deadline_s", "> 0", True),
    "negative cancel": (_set("cancel_at_s", -1.0), "cancel_at_s", ">= 0", True),
    "nan arrival": (_set("arrival_s", math.nan), "arrival_s", "finite", False),
    "missing id": (_delete("id"), "id", "missing required field", True),
    "missing tenant": (_delete("tenant"), "tenant", "missing required field", True),
    "missing workload": (_delete("workload"), "workload", "missing required field", True),
    "missing shape": (_delete("shape"), "shape", "missing required field", True),
    "missing arrival": (_delete("arrival_s"), "arrival_s", "missing required field", True),
    "missing nodes": (_delete("nodes"), "nodes", "missing required field", True),
    "missing node id": (_delete("nodes.0.id"), "nodes[0].id", "missing", True),
    "missing kind": (_delete("nodes.0.kind"), "nodes[0].kind", "missing", True),
    "missing prompt": (_delete("nodes.0.prompt_tokens"), "nodes[0].prompt_tokens", "missing", True),
    "missing output": (_delete("nodes.0.output_tokens"), "nodes[0].output_tokens", "missing", True),
    "missing tool": (_delete("nodes.1.tool"), "nodes[1].tool", "missing", True),
    "missing tool kind": (_delete("nodes.1.tool_kind"), "nodes[1].tool_kind", "missing", True),
    "missing timeout": (_delete("nodes.1.timeout_s"), "nodes[1].timeout_s", "missing", True),
    "missing result": (_delete("nodes.1.result_tokens"), "nodes[1].result_tokens", "missing", True),
    "missing attempts": (_delete("nodes.1.attempts"), "nodes[1].attempts", "missing", True),
    "missing outcome": (
        _delete("nodes.1.attempts.0.outcome"),
        "nodes[1].attempts[0].outcome",
        "missing",
        True,
    ),
    "missing prefix tokens": (_delete("prefix.1.tokens"), "prefix[1].tokens", "missing", True),
    "string arrival": (_set("arrival_s", "soon"), "arrival_s", "expected a number", True),
    "float tokens": (
        _set("nodes.0.prompt_tokens", 1.5),
        "nodes[0].prompt_tokens",
        "expected an integer",
        True,
    ),
    "bool tokens": (
        _set("nodes.0.prompt_tokens", True),
        "nodes[0].prompt_tokens",
        "expected an integer",
        True,
    ),
    "string flag": (
        _set("nodes.1.side_effect", "yes"),
        "nodes[1].side_effect",
        "expected true or false",
        True,
    ),
    "parents not a list": (
        _set("nodes.1.parents", "plan"),
        "nodes[1].parents",
        "expected an array",
        True,
    ),
    "parent not a string": (
        _set("nodes.1.parents", [1]),
        "nodes[1].parents[0]",
        "expected a string",
        True,
    ),
    "node not an object": (_set("nodes.0", 5), "nodes[0]", "expected an object", True),
    "bad kind": (_set("nodes.0.kind", "agent"), "nodes[0].kind", "'agent' is not one of", True),
    "bad branch": (_set("nodes.0.branch", "side"), "nodes[0].branch", "not one of", True),
    "bad tool kind": (_set("nodes.1.tool_kind", "email"), "nodes[1].tool_kind", "not one of", True),
    # the scheduler's catch-all kind is not a recording's: a trace knows what each tool did
    "unrecorded tool kind": (
        _set("nodes.1.tool_kind", "other"),
        "nodes[1].tool_kind",
        "not one of",
        True,
    ),
    "bad outcome": (
        _set("nodes.1.attempts.1.outcome", "maybe"),
        "nodes[1].attempts[1].outcome",
        "not one of",
        True,
    ),
    "unknown top field": (_set("extra", 1), "extra", "unknown field", True),
    "unknown node field": (
        _set("nodes.0.temperature", 0.7),
        "nodes[0].temperature",
        "unknown field",
        True,
    ),
    "llm field on tool": (
        _set("nodes.1.output_tokens", 3),
        "nodes[1].output_tokens",
        "unknown field",
        True,
    ),
    "unknown attempt field": (
        _set("nodes.1.attempts.0.code", 504),
        "nodes[1].attempts[0].code",
        "unknown field",
        True,
    ),
    "unknown prefix field": (_set("prefix.0.sha", "x"), "prefix[0].sha", "unknown field", True),
    "unknown quota field": (_set("quotas.gpu", 1), "quotas.gpu", "unknown field", True),
    "zero quota": (_set("quotas.max_tool_calls", 0), "quotas.max_tool_calls", ">= 1", True),
    "zero wall time": (_set("quotas.max_wall_s", 0), "quotas.max_wall_s", "> 0", True),
    "empty nodes": (_set("nodes", []), "nodes", "at least one node", True),
    "empty attempts": (_set("nodes.2.attempts", []), "nodes[2].attempts", "at least one", True),
    "timeout shorter than timeout_s": (
        _set("nodes.1.attempts.0.latency_s", 2.0),
        "nodes[1].attempts[0].latency_s",
        "a timeout lasts",
        False,
    ),
    "ok beyond timeout_s": (
        _set("nodes.2.attempts.0.latency_s", 6.0),
        "nodes[2].attempts[0].latency_s",
        "exceeds timeout_s",
        False,
    ),
    "zero latency": (
        _set("nodes.2.attempts.0.latency_s", 0),
        "nodes[2].attempts[0].latency_s",
        "> 0",
        True,
    ),
    "attempt after ok": (
        _set("nodes.2.attempts", [{"latency_s": 0.1, "outcome": "ok"}] * 2),
        "nodes[2].attempts[1]",
        "follow an 'ok'",
        False,
    ),
    "main on discarded": (
        _append_node(
            {
                "id": "late",
                "kind": "llm",
                "parents": ["spec"],
                "prompt_tokens": 1,
                "output_tokens": 1,
            }
        ),
        "nodes[8].parents",
        "discarded",
        False,
    ),
    "slash in node id": (_set("nodes.7.id", "a/b"), "nodes[7].id", "does not match", True),
    "bad tenant id": (_set("tenant", "tenant a"), "tenant", "does not match", True),
    "duplicate prefix id": (
        _set("prefix.1.id", "platform/sys"),
        "prefix[1].id",
        "duplicate prefix id",
        False,
    ),
    "empty model": (_set("nodes.0.model", ""), "nodes[0].model", "must not be empty", True),
    "insert after no prefix": (
        _set("nodes.3.insert", {"after": "platform/other", "tokens": 500}),
        "nodes[3].insert.after",
        "not a prefix segment",
        False,
    ),
    "zero insert tokens": (
        _set("nodes.3.insert", {"after": "platform/sys", "tokens": 0}),
        "nodes[3].insert.tokens",
        ">= 1",
        True,
    ),
    "insert without tokens": (
        _set("nodes.3.insert", {"after": "platform/sys"}),
        "nodes[3].insert.tokens",
        "missing required field",
        True,
    ),
    "insert not an object": (_set("nodes.3.insert", 500), "nodes[3].insert", "expected", True),
    "unknown insert field": (
        _set("nodes.3.insert", {"after": "platform/sys", "tokens": 5, "at": 3}),
        "nodes[3].insert.at",
        "unknown field",
        True,
    ),
    "bad insert point id": (
        _set("nodes.3.insert", {"after": "bad id", "tokens": 5}),
        "nodes[3].insert.after",
        "does not match",
        True,
    ),
    "insert on a tool": (
        _set("nodes.1.insert", {"after": "platform/sys", "tokens": 5}),
        "nodes[1].insert",
        "unknown field",
        True,
    ),
}
