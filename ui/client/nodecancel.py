"""A node cancel, as the consoles ask for it and read its answer.

``POST /v1/programs/{id}/nodes/{node_id}/cancel`` (docs/API.md) cancels a node and its
descendants not yet ended; the program runs on. Before asking, a console says what it will
stop: :func:`cancellable` (only a node that has not ended is offered) and
:func:`descendants_to_cancel` (what the server cancels with it, by the same rule as
``scheduler/dag.py``'s ``cancel_subtree``: every descendant not yet ended, through ended ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentconsole.httpclient import jsonread as j
from agentconsole.ui.client.programs import Node, ProgramDetail

#: the node states that have ended: such a node is not offered a cancel (the server answers
#: 409 for one that ended otherwise than by a cancel)
ENDED_STATES = frozenset({"done", "failed", "cancelled"})


def cancellable(node: Node, program_state: str) -> bool:
    """Whether a console offers ``node`` a cancel: it has not ended, in a running program."""
    return program_state == "running" and node.state not in ENDED_STATES


def descendants_to_cancel(detail: ProgramDetail, node_id: str) -> tuple[str, ...]:
    """The descendants of ``node_id`` a cancel of it stops too (not yet ended), in the
    detail's node order."""
    children: dict[str, list[str]] = {}
    for parent, child in detail.edges:
        children.setdefault(parent, []).append(child)
    seen = {node_id}
    stack = [node_id]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return tuple(
        n.node_id
        for n in detail.nodes
        if n.node_id in seen and n.node_id != node_id and n.state not in ENDED_STATES
    )


@dataclass(frozen=True, slots=True)
class NodeCancel:
    """The answer to a node cancel: the nodes cancelled (the node and its descendants; none
    for a node cancelled already), the calls aborted and what became of their tools."""

    program_id: str
    node_id: str
    state: str
    program_state: str
    cancelled_nodes: tuple[str, ...]
    aborted_calls: tuple[str, ...]
    interrupted_tools: tuple[str, ...]
    #: side effects let run to their commit (their nodes)
    flagged_tools: tuple[str, ...]
    #: the agent's own tools, left to it (their nodes)
    running_tools: tuple[str, ...]

    @staticmethod
    def parse(data: Any) -> NodeCancel:
        """Parse the answer; missing fields read as empty."""
        d = j.obj(data)
        return NodeCancel(
            program_id=j.text(d, "program_id"),
            node_id=j.text(d, "node_id"),
            state=j.text(d, "state", "cancelled"),
            program_state=j.text(d, "program_state", "running"),
            cancelled_nodes=j.strings(d.get("cancelled_nodes")),
            aborted_calls=j.strings(d.get("aborted_calls")),
            interrupted_tools=j.strings(d.get("interrupted_tools")),
            flagged_tools=j.strings(d.get("flagged_tools")),
            running_tools=j.strings(d.get("running_tools")),
        )
