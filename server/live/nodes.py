"""Creating a program's nodes from API requests: ids, default parents, refusals.

A node cancelled on request (``Node.withdrawn``) takes no new child and never runs again
(409); defaulted parents pass it by, as a branch the agent dropped.

Agents often name neither node nor parents. Then an LLM node's parents are the tool nodes
added since the program's last LLM node (the results it reads), or that LLM node itself; a
tool node's parent is the last LLM node (the call that asked for it). Node ids default to
``llm-<n>`` / ``tool-<n>``. A node id that exists is reused as a new attempt of that node.

A declaration (``POST /v1/programs/{id}/nodes``) is idempotent: declaring a node again exactly
as it was declared answers the node as it is, so that an agent may retry a declaration whose
answer it never saw (a timeout, a 503 whose node was open in memory, a restart); declaring an
existing id otherwise is a conflict.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from agentconsole.scheduler.controller import ProgramController, QuotaExceeded
from agentconsole.scheduler.dag import DagError, edge_count
from agentconsole.scheduler.program import (
    Branch,
    Node,
    NodeKind,
    NodeState,
    Program,
    ToolSpec,
)
from agentconsole.server.live.errors import (
    Conflict,
    InvalidRequest,
    NodeWithdrawn,
    ProgramClosed,
    QuotaError,
)
from agentconsole.server.live.tenants import TenantBudgets


def _tool_name(tool: ToolSpec | None) -> str | None:
    return tool.name if tool is not None else None


def default_parents(program: Program, kind: NodeKind) -> tuple[str, ...]:
    """The parents an agent that names none most likely means (module docstring)."""
    since_llm: list[str] = []
    for node in reversed(program.nodes.values()):
        if node.withdrawn:
            continue  # a cancelled branch: what comes next does not build on it
        if node.kind is NodeKind.LLM:
            if kind is NodeKind.TOOL or not since_llm:
                return (node.node_id,)
            break
        if node.state is not NodeState.CANCELLED:
            since_llm.append(node.node_id)
    return tuple(reversed(since_llm)) if kind is NodeKind.LLM else ()


@contextmanager
def _controller_refusals(parents_field: str) -> Iterator[None]:
    """The controller's refusals of a node as the service's errors (``parents_field``: where
    the request names the node's parents)."""
    try:
        yield
    except DagError as error:
        raise InvalidRequest(str(error), field=parents_field) from None
    except QuotaExceeded as error:
        # ``value`` is what the node would make it: the program still shows what it has
        why = f"this node would make it {error.value:g}; nothing was added"
        raise QuotaError(error.program_id, error.quota, error.limit, error.limit, why=why) from None


#: where a chat call names its node's parents (its ``agentconsole`` object's field)
CHAT_PARENTS_FIELD = "agentconsole.parent_ids"


class NodeBook:
    """Adds nodes through the controller, translating its refusals into service errors; every
    new node, whatever route declares it, passes the tenant's limits on stored bytes, nodes
    per program and parent links per program first."""

    def __init__(self, controller: ProgramController, tenants: TenantBudgets) -> None:
        self.controller = controller
        self.tenants = tenants

    def add(
        self,
        program: Program,
        node_id: str | None,
        kind: NodeKind,
        parents: tuple[str, ...] | None,
        now: float,
        *,
        tool: ToolSpec | None = None,
        branch: Branch = Branch.MAIN,
        parents_field: str = "parents",
    ) -> Node:
        """Add a new node (id and parents defaulted when None; ``parents_field``: the request's
        name of them, which a refusal names). Raises as :meth:`new_node` does."""
        node = self.new_node(
            program, node_id, kind, parents, tool=tool, branch=branch, parents_field=parents_field
        )
        return self.insert(program, node, now, parents_field=parents_field)

    def new_node(
        self,
        program: Program,
        node_id: str | None,
        kind: NodeKind,
        parents: tuple[str, ...] | None,
        *,
        tool: ToolSpec | None = None,
        branch: Branch = Branch.MAIN,
        parents_field: str = "parents",
    ) -> Node:
        """The node :meth:`add` would add, checked by every rule it passes and not added
        (:meth:`insert` adds it while nothing changed the program meanwhile). Raises
        InvalidRequest for an unknown parent, Conflict for a duplicate id, QuotaError for the
        tool-call and branch quotas, Conflict for a program that has ended, TenantLimitError
        for the tenant's stored bytes (429), nodes per program or parent links per program
        (403). Changes nothing."""
        if program.state.terminal:
            raise ProgramClosed(program.program_id, program.state.value)
        for parent in parents or ():
            if parent in program.nodes and program.nodes[parent].withdrawn:
                raise NodeWithdrawn(program.program_id, parent, field=parents_field)
        self.tenants.check_new_node(program.tenant, program.program_id, len(program.nodes))
        if node_id is None:
            node_id = self._fresh_id(program, kind)
        elif node_id in program.nodes:
            raise Conflict(f"node {node_id!r} already exists", field="node_id")
        if parents is None:
            parents = default_parents(program, kind)
        if parents:  # a root adds no link (and skips the count)
            edges = edge_count(program)
            self.tenants.check_new_edges(program.tenant, program.program_id, edges, len(parents))
        node = Node(node_id, program.program_id, kind, parents, tool=tool, branch=branch)
        with _controller_refusals(parents_field):
            self.controller.check_node(program.program_id, node)
        return node

    def insert(
        self, program: Program, node: Node, now: float, *, parents_field: str = "parents"
    ) -> Node:
        """Add ``node``, made by :meth:`new_node` for ``program``, through the controller."""
        with _controller_refusals(parents_field):
            return self.controller.add_node(program.program_id, node, now)

    def declare(
        self,
        program: Program,
        node_id: str | None,
        kind: NodeKind,
        parents: tuple[str, ...],
        now: float,
        *,
        tool: ToolSpec | None = None,
        branch: Branch = Branch.MAIN,
    ) -> Node:
        """The node an agent declares ahead (``add`` with the given parents), or the existing
        ``node_id`` when this repeats its declaration: same kind, parents, tool and branch
        (module docstring). Raises Conflict for an existing id declared otherwise."""
        existing = program.nodes.get(node_id) if node_id is not None else None
        if existing is None:
            return self.add(program, node_id, kind, parents, now, tool=tool, branch=branch)
        # the tool by name: running it may have refined the spec to the registered one
        declared = (existing.kind, existing.parents, _tool_name(existing.tool), existing.branch)
        if declared != (kind, parents, _tool_name(tool), branch):
            raise Conflict(f"node {node_id!r} already exists, declared otherwise", field="node_id")
        return existing

    def llm_node(
        self, program: Program, node_id: str | None, parents: tuple[str, ...] | None
    ) -> Node:
        """The node a chat call runs as: an existing LLM node (its next attempt), or a new one
        :meth:`new_node` checked and did not add: the caller adds it (:meth:`insert`) once
        the call passed the checks of its own (its cost), so that a call refused leaves no
        node behind. Raises as :meth:`new_node` does, or for a node that cannot run again.
        Changes nothing."""
        existing = program.nodes.get(node_id) if node_id is not None else None
        if existing is None:
            node = self.new_node(
                program, node_id, NodeKind.LLM, parents, parents_field=CHAT_PARENTS_FIELD
            )
            # the figure the controller gives it when added; the call plans its model by it
            node.expected_output_tokens = self.controller.expected_output_tokens(program)
            return node
        self._check_rerun(existing, NodeKind.LLM)
        if existing.withdrawn:
            raise NodeWithdrawn(program.program_id, existing.node_id)
        return existing

    def tool_node(
        self,
        program: Program,
        node_id: str,
        spec: ToolSpec,
        parents: tuple[str, ...] | None,
        now: float,
    ) -> Node:
        """The tool node ``node_id``: new, or the existing one unchanged (idempotent: a retry
        neither fails nor counts against the tool-call quota again)."""
        existing = program.nodes.get(node_id)
        if existing is None:
            return self.add(program, node_id, NodeKind.TOOL, parents, now, tool=spec)
        if existing.kind is not NodeKind.TOOL:
            raise InvalidRequest(f"node {node_id!r} is not a tool node", field="node_id")
        if existing.withdrawn:
            raise NodeWithdrawn(program.program_id, node_id)
        return existing

    @staticmethod
    def _check_rerun(node: Node, kind: NodeKind) -> None:
        if node.kind is not kind:
            raise InvalidRequest(
                f"node {node.node_id!r} is a {node.kind.value} node, not {kind.value}",
                field="node_id",
            )
        if node.state is NodeState.RUNNING:
            # it passes once the running attempt ends: worth a client's retry
            raise Conflict(
                f"node {node.node_id!r} is already running", field="node_id", retryable=True
            )

    @staticmethod
    def _fresh_id(program: Program, kind: NodeKind) -> str:
        n = len(program.nodes) + 1
        while f"{kind.value}-{n}" in program.nodes:
            n += 1
        return f"{kind.value}-{n}"

    @staticmethod
    def fail_attempt(program: Program, node_id: str, now: float) -> None:
        """Close the open attempt of a call the runtime refused; the node can be retried.
        (The controller has no call for this.)"""
        node = program.nodes[node_id]
        if node.attempts and node.attempts[-1].finished_at is None:
            node.attempts[-1].finished_at, node.attempts[-1].outcome = now, "failed"
        node.state = NodeState.FAILED
