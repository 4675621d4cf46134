"""Typed views of the API's program JSON (``ProgramSummary``, ``Program``, ``Node``).

Parsed at the edge like the rest of :mod:`agentconsole.ui.client.models`: missing or extra
fields never raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentconsole.httpclient import jsonread as j


def _priority(value: Any) -> tuple[str, tuple[float, ...]]:
    """A display string and a numeric sort key for an opaque ``priority_key``."""
    items = value if isinstance(value, list) else [value]
    nums = tuple(float(v) for v in items if isinstance(v, int | float) and not isinstance(v, bool))
    if value is None:
        return "-", ()
    shown = ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in items)
    return shown, nums


@dataclass(frozen=True, slots=True)
class ProgramSummary:
    """One row of ``GET /v1/programs``."""

    program_id: str
    tenant: str
    state: str
    created_at: float
    finished_at: float | None
    deadline: float | None
    labels: Mapping[str, str]
    nodes_done: int
    nodes_known: int
    attained_service_s: float
    priority: str
    priority_sort: tuple[float, ...]
    critical_path_idle_s: float
    deadline_slack_s: float | None
    tokens_used: int
    tool_calls: int
    branches: int

    @staticmethod
    def parse(data: Any) -> ProgramSummary:
        """Parse a ``ProgramSummary`` (or the summary fields of a ``Program``)."""
        d = j.obj(data)
        shown, sort_key = _priority(d.get("priority_key"))
        return ProgramSummary(
            program_id=j.text(d, "program_id"),
            tenant=j.text(d, "tenant"),
            state=j.text(d, "state", "unknown"),
            created_at=j.num(d, "created_at"),
            finished_at=j.opt_num(d, "finished_at"),
            deadline=j.opt_num(d, "deadline"),
            labels=j.str_map(d.get("labels")),
            nodes_done=j.integer(d, "nodes_done"),
            nodes_known=j.integer(d, "nodes_known"),
            attained_service_s=j.num(d, "attained_service_s"),
            priority=shown,
            priority_sort=sort_key,
            critical_path_idle_s=j.num(d, "critical_path_idle_s"),
            deadline_slack_s=j.opt_num(d, "deadline_slack_s"),
            tokens_used=j.integer(d, "tokens_used"),
            tool_calls=j.integer(d, "tool_calls"),
            branches=j.integer(d, "branches"),
        )


@dataclass(frozen=True, slots=True)
class ProgramPage:
    """Programs fetched from a paged listing; ``total`` may exceed ``len(programs)``."""

    programs: tuple[ProgramSummary, ...]
    total: int

    @property
    def hidden(self) -> int:
        """How many matching programs were not fetched (shown as "N hidden")."""
        return max(0, self.total - len(self.programs))


@dataclass(frozen=True, slots=True)
class Phase:
    """One span of a node's timeline; ``end`` is None while the span is still open (the
    server sends ``null``: a running tool, a call still decoding), never 0.0, which would
    read as a span that ended before the epoch's first second."""

    phase: str
    start: float
    end: float | None

    @property
    def is_open(self) -> bool:
        """Whether the span is still running."""
        return self.end is None

    def end_by(self, now: float) -> float:
        """Where the span stops when drawn at ``now``: its end, or ``now`` while it is open
        (never before its start, should the client's clock lag the server's)."""
        return max(self.start, now) if self.end is None else self.end


@dataclass(frozen=True, slots=True)
class Node:
    """A node of a program's DAG (``Node`` in the API)."""

    node_id: str
    kind: str
    state: str
    parents: tuple[str, ...]
    branch: str
    tool: str | None
    attempts: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    queue_s: float
    service_s: float
    tool_s: float
    kv_restore_s: float
    kv_tier: str | None
    timeline: tuple[Phase, ...]
    #: the model that ran it and why (several models served; None otherwise)
    model: str | None = None
    model_reason: str | None = None
    #: cancelled by a node cancel (its own or an ancestor's), not with its program
    withdrawn: bool = False

    @staticmethod
    def parse(data: Any) -> Node:
        """Parse one node."""
        d = j.obj(data)
        spans = tuple(
            Phase(j.text(p, "phase"), j.num(p, "start"), j.opt_num(p, "end"))
            for p in j.objects(d.get("timeline"))
        )
        return Node(
            node_id=j.text(d, "node_id"),
            kind=j.text(d, "kind", "llm"),
            state=j.text(d, "state", "unknown"),
            parents=j.strings(d.get("parents")),
            branch=j.text(d, "branch", "main"),
            tool=j.opt_text(d, "tool"),
            attempts=j.integer(d, "attempts"),
            prompt_tokens=j.integer(d, "prompt_tokens"),
            cached_tokens=j.integer(d, "cached_tokens"),
            output_tokens=j.integer(d, "output_tokens"),
            queue_s=j.num(d, "queue_s"),
            service_s=j.num(d, "service_s"),
            tool_s=j.num(d, "tool_s"),
            kv_restore_s=j.num(d, "kv_restore_s"),
            kv_tier=j.opt_text(d, "kv_tier"),
            timeline=spans,
            model=j.opt_text(d, "model"),
            model_reason=j.opt_text(j.obj(d.get("model_choice")), "reason"),
            withdrawn=j.flag(d, "withdrawn"),
        )


@dataclass(frozen=True, slots=True)
class ProgramDetail:
    """``GET /v1/programs/{id}``: the summary plus the DAG."""

    summary: ProgramSummary
    quotas: Mapping[str, float]
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str], ...]
    critical_path: tuple[str, ...]
    kv: Mapping[str, float]
    #: prompt tokens prefilled again because of mid-prompt insertions
    lost_reuse_tokens: int = 0

    @property
    def running_spans(self) -> bool:
        """Whether any node's timeline has a span still open (its bar grows with time)."""
        return any(p.is_open for n in self.nodes for p in n.timeline)

    def latest_time(self) -> float | None:
        """The latest moment the timelines name (a start, or a closed span's end); None
        without any span."""
        times = [
            t for n in self.nodes for p in n.timeline for t in (p.start, p.end) if t is not None
        ]
        return max(times, default=None)

    @staticmethod
    def parse(data: Any) -> ProgramDetail:
        """Parse a ``Program``; edges missing from ``edges`` are taken from node parents."""
        d = j.obj(data)
        nodes = tuple(Node.parse(n) for n in j.objects(d.get("nodes")))
        edges: list[tuple[str, str]] = []
        raw_edges = d.get("edges")
        for edge in raw_edges if isinstance(raw_edges, list) else []:
            if isinstance(edge, list) and len(edge) == 2:
                edges.append((str(edge[0]), str(edge[1])))
        if not edges:
            edges = [(p, n.node_id) for n in nodes for p in n.parents]
        return ProgramDetail(
            summary=ProgramSummary.parse(d),
            quotas=j.num_map(d.get("quotas")),
            nodes=nodes,
            edges=tuple(edges),
            critical_path=j.strings(d.get("critical_path")),
            kv=j.num_map(d.get("kv")),
            lost_reuse_tokens=j.integer(j.obj(d.get("prompt_insertions")), "lost_reuse_tokens"),
        )
