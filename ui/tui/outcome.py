"""One-line descriptions of operator action results, for notifications."""

from __future__ import annotations

from collections.abc import Sequence, Sized
from typing import Any

from agentconsole.httpclient import jsonread as j
from agentconsole.ui.client.http import ActionResult
from agentconsole.ui.client.nodecancel import NodeCancel


def _n(body: Any, key: str) -> int:
    value = body.get(key)
    return len(value) if isinstance(value, Sized) and not isinstance(value, str) else 0


#: how many of a cancel's side-effecting tools the notice names
NAMED_TOOLS = 3


def still_running(body: Any, *, operator: bool = True) -> str:
    """What a cancel did to its side-effecting tools (``flagged_tools``, their nodes): it let
    them run on, since an effect must not be cut half way; each commits when it ends, or, when
    its end leaves the effect in doubt, waits for an operator (the tools view, which a
    tenant's key is not offered)."""
    nodes = list(j.strings(body.get("flagged_tools")))
    named = ", ".join(nodes[:NAMED_TOOLS]) + (
        f" and {len(nodes) - NAMED_TOOLS} more" if len(nodes) > NAMED_TOOLS else ""
    )
    doubt = "is listed in 7 tools to reconcile" if operator else "waits for an operator"
    return (
        f"side-effecting tools still running: {named} (they finish and commit; one whose "
        f"effect ends in doubt {doubt})"
    )


def describe(result: ActionResult, *, operator: bool = True) -> str:
    """``cancelled prog-1: 2 calls aborted, 1 tool interrupted`` and the like; ``operator``:
    whether the key may see the tool calls in doubt (a tenant's may not)."""
    body, pid = result.body, result.program_id
    if result.action == "cancel":
        text = f"cancelled {pid}: {_n(body, 'aborted_calls')} calls aborted"
        tools = _n(body, "interrupted_tools")
        flagged = _n(body, "flagged_tools")
        if tools:
            text += f", {tools} tools interrupted"
        if flagged:
            text += "; " + still_running(body, operator=operator)
        return text + left_to_the_agent(j.strings(body.get("running_tools")))
    if result.action == "preempt":
        calls = _n(body, "preempted_calls") or _n(body, "requeued_calls")
        return f"preempted {pid}: {calls} running calls requeued"
    if result.action == "boost":
        return _boosted(body, pid)
    return f"{result.action} {pid}: done"


def _boosted(body: Any, pid: str) -> str:
    """The amount the server applied: the dashboard sends none, so the server's default (its
    answer's ``boost``, seconds of policy key) is the only place the operator learns it."""
    amount = j.opt_num(body, "boost")
    if amount is None:
        return f"boosted {pid} (the server did not say by how much)"
    reranked = _n(body, "reranked_calls")
    return f"boosted {pid} by {amount:g}s of policy key: {reranked} queued calls re-ranked"


def describe_node_cancel(answer: NodeCancel, *, operator: bool = True) -> str:
    """``cancelled n3 of prog-1 and 2 descendants: 1 calls aborted, 0 tools interrupted``,
    then the side effects still running (as a program cancel's notice says them) and the
    agent's own tools left to it; a node cancelled already says nothing more was stopped."""
    where = f"{answer.node_id} of {answer.program_id}"
    if not answer.cancelled_nodes:
        return f"{where} was cancelled already: nothing more to stop"
    others = len([n for n in answer.cancelled_nodes if n != answer.node_id])
    text = f"cancelled {where}" + (f" and {others} descendants" if others else "")
    text += (
        f": {len(answer.aborted_calls)} calls aborted, "
        f"{len(answer.interrupted_tools)} tools interrupted"
    )
    if answer.flagged_tools:
        text += "; " + still_running(
            {"flagged_tools": list(answer.flagged_tools)}, operator=operator
        )
    return text + left_to_the_agent(answer.running_tools)


def left_to_the_agent(nodes: Sequence[str]) -> str:
    """What a cancel said of the agent's own tools (``running_tools``): the agent runs them,
    so the server stopped none; "" when there are none."""
    return f"; the agent's own tools left to it: {', '.join(nodes)}" if nodes else ""
