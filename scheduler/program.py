"""The program model: programs, nodes, attempts, quotas and retry policy.

An agent run is a *program*: a dynamic DAG whose nodes are LLM calls and tool calls. Nodes
appear only when the model has answered (their parents are known when they are added), so the
scheduler is never clairvoyant. These are plain mutable dataclasses owned by the controller;
the DAG algorithms live in :mod:`agentconsole.scheduler.dag`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from agentconsole.scheduler.models.choice import ModelChoice


class NodeKind(StrEnum):
    LLM = "llm"
    TOOL = "tool"


class ToolKind(StrEnum):
    """What a tool does; tools of one kind share a latency distribution by default."""

    SEARCH = "search"
    CODE_EXEC = "code_exec"
    TEST_RUN = "test_run"
    BROWSER = "browser"
    DATABASE = "database"
    FILE = "file"
    HTTP = "http"
    OTHER = "other"


class NodeState(StrEnum):
    PENDING = "pending"  # known, some parent not finished
    READY = "ready"  # all parents done; queued (LLM) or about to start (tool)
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        # identity tests against module globals: hashing an enum member runs Python code, and
        # even ``NodeState.DONE`` (an attribute of the enum class) costs ~10x a global lookup
        return self is _DONE or self is _FAILED or self is _CANCELLED


class ProgramState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self is not _PROGRAM_RUNNING


class Branch(StrEnum):
    MAIN = "main"
    REPAIR = "repair"  # opened after a verifier failure
    DISCARDED = "discarded"  # speculative branch whose result is thrown away


@dataclass(frozen=True, slots=True)
class Quotas:
    """The per-program limits of seed sections 13 and 17; ``None`` means unlimited.

    The controller and the live service enforce the first four; ``concurrent_tools`` (at most
    that many tool calls of the program at once) is recorded by traces and carried through,
    not enforced. A value: several programs, and a trace, may share one instance.
    """

    wall_time_s: float | None = None
    tokens: int | None = None
    tool_calls: int | None = None
    branches: int | None = None
    concurrent_tools: int | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed attempt is retried. Side-effecting, non-idempotent tools are never
    retried automatically regardless of ``max_attempts`` (seed section 12)."""

    max_attempts: int = 3
    backoff_s: float = 0.0


#: the policy of a node that names none: a frozen value, so every such node shares it (one
#: object fewer per node the collector tracks, and no constructor call per node)
DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    kind: ToolKind = ToolKind.OTHER
    side_effect: bool = False
    idempotent: bool = True
    timeout_s: float | None = None

    @property
    def auto_retry_safe(self) -> bool:
        """A retry cannot repeat an effect: read-only, or the tool deduplicates by key."""
        return not self.side_effect or self.idempotent

    def fields(self) -> dict[str, str | bool | float | None]:
        """The spec as flat JSON fields (a tool node's event data and stored row), so a
        restart rebuilds it whole (:meth:`from_fields`): a side effect must stay one."""
        return {
            "tool": self.name,
            "tool_kind": str(self.kind),  # the value; str() runs at C speed, .value does not
            "side_effect": self.side_effect,
            "idempotent": self.idempotent,
            "timeout_s": self.timeout_s,
        }

    @classmethod
    def from_fields(cls, data: Mapping[str, object]) -> ToolSpec | None:
        """The spec :meth:`fields` wrote (None without a tool name). Fields missing, as in
        what an older version stored, take the defaults; an unknown kind is ``other``."""
        name = data.get("tool")
        if not isinstance(name, str) or not name:
            return None
        kind = data.get("tool_kind")
        timeout = data.get("timeout_s")
        return cls(
            name,
            ToolKind(kind) if kind in _TOOL_KINDS else ToolKind.OTHER,
            side_effect=data.get("side_effect") is True,
            idempotent=data.get("idempotent") is not False,
            timeout_s=float(timeout) if isinstance(timeout, int | float) else None,
        )


_TOOL_KINDS = frozenset(k.value for k in ToolKind)


@dataclass(slots=True)
class Attempt:
    number: int
    started_at: float
    finished_at: float | None = None
    outcome: str = ""  # ok | fail | timeout | aborted | preempted
    #: its call's first token (None: none yet, a tool, or an attempt rebuilt from the store,
    #: whose rows keep the node's first token only)
    first_token_at: float | None = None


@dataclass(slots=True)
class Node:
    """One LLM or tool call of a program.

    Token fields are estimates until the call finishes, then actuals: ``prompt_tokens`` is the
    whole context the call prefills (cached or not), ``output_tokens`` what it generated.
    """

    node_id: str
    program_id: str
    kind: NodeKind
    parents: tuple[str, ...] = ()
    tool: ToolSpec | None = None
    branch: Branch = Branch.MAIN
    context_refs: tuple[str, ...] = ()  # prefix/segment ids this call's context is built from
    model_candidates: tuple[str, ...] = ()
    #: the model a selector chose for this call and why (multi-model runs only)
    model_choice: ModelChoice | None = None
    retry: RetryPolicy = DEFAULT_RETRY
    state: NodeState = NodeState.PENDING
    attempts: list[Attempt] = field(default_factory=list)
    created_at: float = 0.0
    ready_at: float | None = None
    #: when its call last entered a queue (its ticket was made, or it was preempted): the
    #: attempt's queue time counts from here, not from ``ready_at`` (an agent that declares a
    #: node ahead calls it later; that time is its own, not the server's queue)
    queued_at: float | None = None
    started_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    expected_output_tokens: float = 0.0
    #: the output its latest call's ticket expected (the estimate capped at ``max_tokens``):
    #: what the estimator's error is measured against, as the policies ranked by it
    ticket_output_tokens: float | None = None
    #: the most its last call may generate (the request's ``max_tokens``; None: not said):
    #: a cap on what the scheduler expects it to generate, and kept for a what-if replay
    max_output_tokens: int | None = None
    service_s: float = 0.0  # GPU time attained by this node (all attempts)
    tool_s: float = 0.0  # tool execution time (all attempts)
    cp_before_s: float = 0.0  # ATLAS: GPU service along the heaviest path into this node
    queue_s: float = 0.0  # time its calls spent queued but not running (all attempts)
    kv_restore_s: float = 0.0  # reload/recompute time on this node's critical path
    #: cancelled on request (its own node cancel, or an ancestor's): unlike a node closed by a
    #: disconnect, it never runs again and no new node may hang from it
    withdrawn: bool = False

    @property
    def is_llm(self) -> bool:
        return self.kind is _LLM

    @property
    def attempt(self) -> int:
        """The current (or last) attempt number, 1-based; 0 before the first start."""
        return len(self.attempts)

    @property
    def in_flight(self) -> bool:
        """Its call or tool runs, or was preempted and waits to resume: requeued READY with
        its attempt still open (an engine resumes a preempted call without a new start)."""
        if self.state is _RUNNING:
            return True
        return (
            self.state is _READY and bool(self.attempts) and self.attempts[-1].finished_at is None
        )


@dataclass(slots=True)
class Program:
    """A program and the bookkeeping every policy reads.

    ``attained_service_s`` is PLAS's signal (service of all completed work);
    ``cp_service_s`` is ATLAS's (attained service along the critical path so far).
    """

    program_id: str
    tenant: str
    created_at: float
    deadline: float | None = None  # absolute time
    quotas: Quotas = field(default_factory=Quotas)
    labels: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    state: ProgramState = ProgramState.RUNNING
    finished_at: float | None = None
    attained_service_s: float = 0.0
    cp_service_s: float = 0.0
    wait_s: float = 0.0  # accumulated queue time of its LLM calls
    completed_calls: int = 0
    tokens_used: int = 0
    tool_calls: int = 0
    branches: int = 1
    first_progress_at: float | None = None
    boost: float = 0.0  # operator boost: subtracted from every policy key of this program

    @property
    def known_nodes(self) -> int:
        return len(self.nodes)

    @property
    def done_nodes(self) -> int:
        return sum(1 for n in self.nodes.values() if n.state is _DONE)


# Members as module globals, for the identity tests above and on the controller's hot paths
# (an enum class attribute is a slow lookup; a global is a dict hit).
_LLM = NodeKind.LLM
_RUNNING, _READY = NodeState.RUNNING, NodeState.READY
_DONE, _FAILED, _CANCELLED = NodeState.DONE, NodeState.FAILED, NodeState.CANCELLED
_PROGRAM_RUNNING = ProgramState.RUNNING
