"""Deterministic canned programs for the console tests: realistic agent DAGs with timelines.

A program is a chain of LLM calls and tool calls with occasional fan-outs (parallel tool calls
joined by the next LLM call), so the DAG, the critical path and the timelines look like the
ones ``serve --demo`` produces. Everything derives from one ``random.Random`` seed and a fixed
base time, so SVG snapshots are stable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

BASE_T = 1_767_225_600.0  # 2026-01-01T00:00:00Z
TENANTS = ("tenant-a", "tenant-b", "tenant-c")
TOOLS = ("search", "code_exec", "test_run", "browser", "file")
WORKLOADS = ("swe-agent", "research", "data-analysis")


@dataclass(slots=True)
class StubNode:
    """One node; ``timeline`` holds ``(phase, start, end)`` spans (a running node's last
    one is sent open, see :meth:`spans_json`)."""

    node_id: str
    kind: str
    parents: list[str]
    state: str = "pending"
    tool: str | None = None
    attempts: int = 1
    created_at: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    kv_tier: str | None = None
    timeline: list[tuple[str, float, float]] = field(default_factory=list)
    #: cancelled by a node cancel (its own or an ancestor's), not with its program
    withdrawn: bool = False

    def seconds(self, *phases: str) -> float:
        """Total time spent in ``phases``."""
        return sum(end - start for phase, start, end in self.timeline if phase in phases)

    def end(self) -> float:
        """When the last span ended (creation time if none)."""
        return max((end for _, _, end in self.timeline), default=self.created_at)

    def to_json(self) -> dict[str, Any]:
        """The API's ``Node`` object."""
        times = [s for _, s, _ in self.timeline]
        return {
            "node_id": self.node_id,
            "kind": self.kind,
            "state": self.state,
            "parents": list(self.parents),
            "branch": "main",
            "tool": self.tool,
            "attempts": self.attempts,
            "created_at": self.created_at,
            "ready_at": self.created_at,
            "started_at": min(times) if times else None,
            "first_token_at": None,
            "finished_at": self.end() if self.state == "done" else None,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "queue_s": round(self.seconds("queue"), 4),
            "service_s": round(self.seconds("prefill", "decode"), 4),
            "tool_s": round(self.seconds("tool"), 4),
            "kv_restore_s": round(self.seconds("kv"), 4),
            "kv_tier": self.kv_tier,
            "timeline": self.spans_json(),
            "withdrawn": self.withdrawn,
        }

    def spans_json(self) -> list[dict[str, Any]]:
        """The timeline as the server sends it: a running node's last span is still open
        (``end: null``); the end kept here is only how far the stub let it get."""
        spans: list[dict[str, Any]] = [
            {"phase": p, "start": s, "end": e} for p, s, e in self.timeline
        ]
        if self.state == "running" and spans:
            spans[-1]["end"] = None
        return spans


@dataclass(slots=True)
class StubProgram:
    """One program with its nodes in creation order."""

    program_id: str
    tenant: str
    workload: str
    created_at: float
    deadline: float | None
    state: str = "running"
    finished_at: float | None = None
    boost: float = 0.0
    nodes: list[StubNode] = field(default_factory=list)
    planned: int = 8


def run_llm(rng: random.Random, node: StubNode, start: float, *, finish: bool) -> float:
    """Fill an LLM node's spans from ``start``; unfinished nodes stop mid-decode."""
    t = start
    queue = rng.uniform(0.01, 0.6)
    node.timeline.append(("queue", t, t + queue))
    t += queue
    if rng.random() < 0.25:
        reload = rng.uniform(0.02, 0.15)
        node.timeline.append(("kv", t, t + reload))
        t += reload
    node.prompt_tokens = rng.randrange(2_000, 60_000)
    node.cached_tokens = int(node.prompt_tokens * rng.uniform(0.3, 0.95))
    prefill = (node.prompt_tokens - node.cached_tokens) / 40_000
    node.timeline.append(("prefill", t, t + prefill))
    t += prefill
    decode = rng.uniform(0.3, 2.5) * (1.0 if finish else 0.5)
    node.output_tokens = int(decode * 60)
    node.timeline.append(("decode", t, t + decode))
    node.state = "done" if finish else "running"
    node.kv_tier = rng.choice(("hbm", "hbm", "dram", "disk")) if finish else "hbm"
    return t + decode


def run_tool(rng: random.Random, node: StubNode, start: float, *, finish: bool) -> float:
    """Fill a tool node's span from ``start``."""
    length = rng.uniform(0.2, 4.0) * (1.0 if finish else 0.4)
    node.timeline.append(("tool", start, start + length))
    node.state = "done" if finish else "running"
    return start + length


def grow(rng: random.Random, prog: StubProgram, *, finish: bool) -> float:
    """Append the next step (an LLM call, or one or more tool calls) and return its end."""
    n = len(prog.nodes)
    last_step = [x for x in prog.nodes if x.created_at == prog.nodes[-1].created_at] if n else []
    parents = [x.node_id for x in last_step]
    start = max((x.end() for x in last_step), default=prog.created_at)
    if n and prog.nodes[-1].kind == "llm":
        width = rng.choice((1, 1, 1, 2, 3)) if n > 1 else 1
        ends = []
        for k in range(width):
            node = StubNode(f"n{n + k}", "tool", parents, tool=rng.choice(TOOLS), created_at=start)
            prog.nodes.append(node)
            ends.append(run_tool(rng, node, start, finish=finish))
        return max(ends)
    node = StubNode(f"n{n}", "llm", parents, created_at=start)
    prog.nodes.append(node)
    return run_llm(rng, node, start, finish=finish)


def make_program(
    rng: random.Random, index: int, *, size: int | None = None, state: str | None = None
) -> StubProgram:
    """A program partly run: finished ones complete all steps, running ones stop mid-step."""
    tenant = TENANTS[index % len(TENANTS)]
    created = BASE_T + index * 0.37
    prog = StubProgram(
        program_id=f"prog-{index:04d}",
        tenant=tenant,
        workload=WORKLOADS[index % len(WORKLOADS)],
        created_at=created,
        deadline=created + rng.choice((60.0, 120.0, 300.0)) if index % 4 else None,
    )
    prog.planned = size if size is not None else rng.randrange(5, 22)
    roll = rng.random()
    if state is None:
        state = "running" if roll < 0.62 else "finished" if roll < 0.88 else "failed"
    steps = prog.planned if state != "running" else max(2, int(prog.planned * roll))
    end = created
    for _ in range(steps - 1):
        end = grow(rng, prog, finish=True)
    end = grow(rng, prog, finish=state != "running")
    if state != "running":
        prog.state = state
        prog.finished_at = end
        if state == "failed":
            prog.nodes[-1].state = "failed"
    elif rng.random() < 0.3 and prog.nodes[-1].kind == "llm":
        # a call waiting in the queue rather than decoding
        last = prog.nodes[-1]
        last.state = "ready"
        last.timeline = last.timeline[:1]
        last.kv_tier = None
    return prog


def critical_path(prog: StubProgram) -> list[str]:
    """Walk back from the latest-ending node along the latest-ending parent."""
    if not prog.nodes:
        return []
    by_id = {n.node_id: n for n in prog.nodes}
    node = max(prog.nodes, key=lambda n: n.end())
    path = [node.node_id]
    while node.parents:
        node = max((by_id[p] for p in node.parents), key=lambda n: n.end())
        path.append(node.node_id)
    return path[::-1]


PHASE_EVENTS = {
    "queue": "call.queued",
    "kv": "kv.reloaded",
    "prefill": "call.scheduled",
    "decode": "call.first_token",
    "tool": "tool.started",
}


def history(prog: StubProgram) -> list[tuple[float, str, StubProgram, str, dict[str, Any]]]:
    """The events a real server would have recorded for ``prog`` so far, unsorted."""
    out: list[tuple[float, str, StubProgram, str, dict[str, Any]]] = [
        (prog.created_at, "program.created", prog, "", {"workload": prog.workload})
    ]
    for node in prog.nodes:
        out.append((node.created_at, "node.added", prog, node.node_id, {"kind": node.kind}))
        for phase, start, _ in node.timeline:
            data: dict[str, Any] = {"tool": node.tool} if node.tool else {}
            if phase == "prefill":
                data = {"prompt": node.prompt_tokens, "cached": node.cached_tokens}
            out.append((start, PHASE_EVENTS[phase], prog, node.node_id, data))
        if node.state == "done":
            kind = "call.finished" if node.kind == "llm" else "tool.finished"
            out.append((node.end(), kind, prog, node.node_id, {"tokens": node.output_tokens}))
    if prog.finished_at is not None:
        out.append((prog.finished_at, f"program.{prog.state}", prog, "", {}))
    return out
