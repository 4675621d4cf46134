"""The trace format's values: one :class:`TraceProgram` per JSONL line, and its context rule.

A trace is a *recording*: each program is a DAG of LLM and tool nodes whose sizes, latencies and
outcomes are already known. A replayer reveals a node only when all its parents have finished.
The dataclasses validate themselves on construction, so a program that exists is well formed;
JSON reading and writing live in :mod:`agentconsole.sample_traces.codec`, and
``sample_traces/README.md`` documents every field.

Context rule: an LLM call's input is the program's prefix segments, then the segments of all of
its ancestors in listing order (LLM: prompt then output; tool: result), then its own prompt. A
``compact`` LLM call starts a fresh context instead (:mod:`agentconsole.sample_traces.scopes`).
An LLM call with an ``insert`` (:class:`Insert`) adds one more segment, its inserted tokens, and
that segment alone has a fixed place: right after the prefix segment it names (after the
insertions of earlier context members at the same point, in listing order), not at the end. So
the rule stays one rule (which segments, in listing order) with one placement exception, and a
later call of the program sees the inserted tokens where they were inserted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from agentconsole.sample_traces.dag import ancestors, resolve_parents
from agentconsole.sample_traces.errors import TraceError
from agentconsole.sample_traces.scopes import context_members, node_scopes

# The trace format speaks the scheduler's vocabulary: a trace's node kinds, branches, tool kinds
# and quotas are the program model's own values (re-exported here as part of the format).
from agentconsole.scheduler.program import Branch as Branch
from agentconsole.scheduler.program import NodeKind as NodeKind
from agentconsole.scheduler.program import Quotas as Quotas
from agentconsole.scheduler.program import ToolKind as ToolKind

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
PREFIX_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"
_ID = re.compile(ID_PATTERN)
_PREFIX_ID = re.compile(PREFIX_ID_PATTERN)


#: The tool kinds a trace records: a recording knows what each tool did, so never ``other``.
TRACE_TOOL_KINDS = tuple(k for k in ToolKind if k is not ToolKind.OTHER)

#: The quotas as the format writes them: the field's name in a trace, the :class:`Quotas`
#: attribute it fills, and whether it is seconds (a finite number > 0) or a count (>= 1).
QUOTA_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("max_total_tokens", "tokens", False),
    ("max_tool_calls", "tool_calls", False),
    ("max_concurrent_tools", "concurrent_tools", False),
    ("max_branches", "branches", False),
    ("max_wall_s", "wall_time_s", True),
)


class Outcome(StrEnum):
    OK = "ok"
    FAIL = "fail"
    TIMEOUT = "timeout"


def _check(ok: bool, message: str, name: str) -> None:
    if not ok:
        raise TraceError(message, field=name)


def _check_id(value: str, name: str, pattern: re.Pattern[str] = _ID) -> None:
    _check(bool(pattern.match(value)), f"{value!r} does not match {pattern.pattern}", name)


def _check_seconds(value: float, name: str, *, positive: bool) -> None:
    _check(math.isfinite(value), "must be a finite number", name)
    if positive:
        _check(value > 0, f"must be > 0, got {value}", name)
    else:
        _check(value >= 0, f"must be >= 0, got {value}", name)


def _check_count(value: int, name: str, *, minimum: int = 0) -> None:
    _check(value >= minimum, f"must be >= {minimum}, got {value}", name)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixSegment:
    """Tokens every call of the program starts with (system prompt, tool schemas, a repo).

    The same ``id`` means the same tokens everywhere in a trace. ``public`` means the platform
    marked it shareable across tenants; otherwise its KV is tenant-scoped.
    """

    id: str
    tokens: int
    public: bool = False

    def __post_init__(self) -> None:
        _check_id(self.id, "id", _PREFIX_ID)
        _check_count(self.tokens, "tokens")


def _check_quotas(quotas: Quotas) -> None:
    """A program's caps (``None``: uncapped), named by their trace fields in errors."""
    for name, attr, seconds in QUOTA_FIELDS:
        value = getattr(quotas, attr)
        if value is None:
            continue
        if seconds:
            _check_seconds(value, f"quotas.{name}", positive=True)
        else:
            _check_count(value, f"quotas.{name}", minimum=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolAttempt:
    """One try of a tool call: how long it occupied the tool and how it ended.

    Checked by the owning :class:`ToolNode`, which knows the timeout it must respect.
    """

    latency_s: float
    outcome: Outcome


@dataclass(frozen=True, slots=True, kw_only=True)
class Insert:
    """New tokens an LLM call puts in the middle of its context instead of appending them
    (retrieved memory or the latest tool results between a fixed system prefix and the
    history): ``tokens`` right after the program's prefix segment ``after``. The program
    checks that ``after`` is one of its prefix segments."""

    after: str
    tokens: int

    def __post_init__(self) -> None:
        _check_id(self.after, "after", _PREFIX_ID)
        _check_count(self.tokens, "tokens", minimum=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMNode:
    """One model call. ``prompt_tokens`` are appended to the inherited context before the call;
    a ``compact`` call inherits no history, only its parents' last segments (a fresh context);
    an ``insert`` puts its tokens after a prefix segment instead (:class:`Insert`)."""

    kind: ClassVar[NodeKind] = NodeKind.LLM
    id: str
    parents: tuple[str, ...] = ()
    branch: Branch = Branch.MAIN
    prompt_tokens: int
    output_tokens: int
    #: the most the agent let the call generate (its ``max_tokens``), when it said: a
    #: scheduler may use it as a bound on the call's length; None: not declared (the length
    #: is learned from the program's kind, never read from ``output_tokens``)
    max_tokens: int | None = None
    model: str | None = None
    #: what the call does for its program (``planner``, ``verify``, ...), which a model
    #: selection rule or an operator pin may map to a model
    role: str | None = None
    #: the models this call may run on (a multi-model program); empty: ``model`` or the default
    candidates: tuple[str, ...] = ()
    compact: bool = False
    insert: Insert | None = None

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_count(self.prompt_tokens, "prompt_tokens")
        _check_count(self.output_tokens, "output_tokens", minimum=1)
        if self.max_tokens is not None:
            _check(
                self.max_tokens >= self.output_tokens,
                f"must be at least output_tokens ({self.output_tokens}), got {self.max_tokens}",
                "max_tokens",
            )
        if self.model is not None:
            _check(bool(self.model), "must not be empty", "model")
        if self.role is not None:
            _check(bool(self.role), "must not be empty", "role")
        _check(all(self.candidates), "must not hold an empty name", "candidates")
        _check(len(set(self.candidates)) == len(self.candidates), "must not repeat", "candidates")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolNode:
    """One tool call with its recorded attempts; ``result_tokens`` join the context at the end.

    Attempts run back to back: a ``timeout`` attempt lasts exactly ``timeout_s``, ``ok``/``fail``
    attempts at most that, and nothing follows an ``ok``. The result (an error text if the last
    attempt did not succeed) is appended whatever the final outcome.
    """

    kind: ClassVar[NodeKind] = NodeKind.TOOL
    id: str
    parents: tuple[str, ...] = ()
    branch: Branch = Branch.MAIN
    tool: str
    tool_kind: ToolKind
    side_effect: bool = False
    idempotent: bool = True
    timeout_s: float
    result_tokens: int
    attempts: tuple[ToolAttempt, ...]

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check(bool(self.tool), "must not be empty", "tool")
        _check(
            self.tool_kind in TRACE_TOOL_KINDS,
            f"{self.tool_kind.value!r} is not a trace's tool kind (a recording knows the kind)",
            "tool_kind",
        )
        _check_seconds(self.timeout_s, "timeout_s", positive=True)
        _check_count(self.result_tokens, "result_tokens")
        _check(bool(self.attempts), "needs at least one attempt", "attempts")
        for k, attempt in enumerate(self.attempts):
            name = f"attempts[{k}]"
            _check_seconds(attempt.latency_s, f"{name}.latency_s", positive=True)
            if attempt.outcome is Outcome.TIMEOUT:
                _check(
                    math.isclose(attempt.latency_s, self.timeout_s, rel_tol=1e-9),
                    f"a timeout lasts timeout_s={self.timeout_s}, got {attempt.latency_s}",
                    f"{name}.latency_s",
                )
            else:
                _check(
                    attempt.latency_s <= self.timeout_s,
                    f"{attempt.latency_s} exceeds timeout_s={self.timeout_s}",
                    f"{name}.latency_s",
                )
            if k and self.attempts[k - 1].outcome is Outcome.OK:
                raise TraceError("no attempt may follow an 'ok' attempt", field=name)

    @property
    def outcome(self) -> Outcome:
        """How the call finally ended (the last attempt's outcome)."""
        return self.attempts[-1].outcome

    @property
    def duration_s(self) -> float:
        """Wall time of all attempts together."""
        return sum(a.latency_s for a in self.attempts)


TraceNode = LLMNode | ToolNode


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceProgram:
    """One agent program: when it arrives, what it starts from, and its node DAG.

    ``deadline_s`` and ``cancel_at_s`` are seconds after ``arrival_s``. Nodes are listed
    parents-first; a non-discarded node never depends on a discarded one.
    """

    id: str
    tenant: str
    workload: str
    shape: str
    arrival_s: float
    prefix: tuple[PrefixSegment, ...] = ()
    nodes: tuple[TraceNode, ...]
    deadline_s: float | None = None
    cancel_at_s: float | None = None
    quotas: Quotas | None = None
    _index: dict[str, int] = field(init=False, repr=False, compare=False, hash=False)
    _parents: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _scopes: tuple[int, ...] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_id(self.tenant, "tenant")
        _check(bool(self.workload), "must not be empty", "workload")
        _check(bool(self.shape), "must not be empty", "shape")
        _check_seconds(self.arrival_s, "arrival_s", positive=False)
        if self.deadline_s is not None:
            _check_seconds(self.deadline_s, "deadline_s", positive=True)
        if self.cancel_at_s is not None:
            _check_seconds(self.cancel_at_s, "cancel_at_s", positive=False)
        if self.quotas is not None:
            _check_quotas(self.quotas)
        seen: set[str] = set()
        for i, seg in enumerate(self.prefix):
            _check(seg.id not in seen, f"duplicate prefix id {seg.id!r}", f"prefix[{i}].id")
            seen.add(seg.id)
        _check(bool(self.nodes), "a program needs at least one node", "nodes")
        for i, node in enumerate(self.nodes):
            if isinstance(node, LLMNode) and node.insert is not None:
                _check(
                    node.insert.after in seen,
                    f"{node.insert.after!r} is not a prefix segment of this program",
                    f"nodes[{i}].insert.after",
                )
        parents = resolve_parents([n.id for n in self.nodes], [n.parents for n in self.nodes])
        for i, node in enumerate(self.nodes):
            if node.branch is not Branch.DISCARDED:
                for j in parents[i]:
                    _check(
                        self.nodes[j].branch is not Branch.DISCARDED,
                        f"parent {self.nodes[j].id!r} is discarded; only discarded nodes "
                        "may depend on discarded ones",
                        f"nodes[{i}].parents",
                    )
        object.__setattr__(self, "_index", {n.id: i for i, n in enumerate(self.nodes)})
        object.__setattr__(self, "_parents", parents)
        compact = [isinstance(n, LLMNode) and n.compact for n in self.nodes]
        object.__setattr__(self, "_scopes", node_scopes(parents, compact) if any(compact) else None)

    def node(self, node_id: str) -> TraceNode:
        """The node called ``node_id``; raises ``KeyError`` if there is none."""
        return self.nodes[self._index[node_id]]

    def ancestors(self, node_id: str) -> list[TraceNode]:
        """All ancestors of ``node_id`` in listing order (a topological order)."""
        return [self.nodes[j] for j in ancestors(self._parents, self._index[node_id])]

    def context_sources(self, node_id: str) -> list[tuple[TraceNode, bool]]:
        """Ancestors feeding ``node_id``'s context in listing order, each with whether all its
        segments do or only its last one (:mod:`~agentconsole.sample_traces.scopes`)."""
        i = self._index[node_id]
        if self._scopes is None:
            return [(self.nodes[j], True) for j in ancestors(self._parents, i)]
        return [(self.nodes[j], w) for j, w in context_members(self._parents, self._scopes, i)]


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of context tokens with a stable key, the unit a radix prefix index stores.

    Keys: the prefix id for prefix segments, ``{program}/{node}/prompt``, ``/out`` (LLM output),
    ``/insert`` (tokens an LLM call inserted) and ``/result`` (tool result) for node segments,
    which are never public.
    """

    key: str
    tokens: int
    public: bool


def node_segments(program: TraceProgram, node: TraceNode) -> list[Segment]:
    """What ``node`` appends to the context of its descendants: prompt + output, or the result
    (an LLM call's inserted tokens go elsewhere: :func:`inserted_segment`)."""
    base = f"{program.id}/{node.id}"
    if isinstance(node, LLMNode):
        return [
            Segment(f"{base}/prompt", node.prompt_tokens, False),
            Segment(f"{base}/out", node.output_tokens, False),
        ]
    return [Segment(f"{base}/result", node.result_tokens, False)]


def inserted_segment(program: TraceProgram, node: LLMNode, insert: Insert) -> Segment:
    """The tokens ``node`` inserts (its ``insert``) as a segment: ``{program}/{node}/insert``."""
    return Segment(f"{program.id}/{node.id}/insert", insert.tokens, False)


def context_segments(program: TraceProgram, node_id: str) -> list[Segment]:
    """The input context of ``node_id``: prefix, its ancestors' segments, then its own prompt
    (:meth:`TraceProgram.context_sources` says which ancestors and which of their segments).

    For an LLM node this is exactly the prompt it prefills (its output is not included); for a
    tool node it is the context its result will be appended to. Ancestors appear in listing
    order, so siblings of a fan-out join in the order they are listed. The inserted segment of
    a whole member (an ancestor in scope, or the node itself) sits right after the prefix
    segment its ``insert`` names, after earlier members' insertions there. Raises ``KeyError``
    for an unknown node id.
    """
    node = program.node(node_id)
    inserted: dict[str, list[Segment]] = {}
    tail: list[Segment] = []
    members = [*program.context_sources(node_id), (node, True)]
    for member, whole in members:
        if whole and isinstance(member, LLMNode) and member.insert is not None:
            at = inserted.setdefault(member.insert.after, [])
            at.append(inserted_segment(program, member, member.insert))
        if member is not node:
            segments = node_segments(program, member)
            tail.extend(segments if whole else segments[-1:])
    if isinstance(node, LLMNode):
        tail.append(Segment(f"{program.id}/{node.id}/prompt", node.prompt_tokens, False))
    out: list[Segment] = []
    for p in program.prefix:
        out.append(Segment(p.id, p.tokens, p.public))
        out.extend(inserted.get(p.id, ()))
    return out + tail


def context_tokens(program: TraceProgram, node_id: str) -> int:
    """Total tokens of :func:`context_segments` (an LLM call's prompt length)."""
    return sum(s.tokens for s in context_segments(program, node_id))
