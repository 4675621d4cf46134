"""One-line descriptions of operator action results, for notifications."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

from agentconsole.httpclient import jsonread as j
from agentconsole.ui.client.http import ActionResult


def _n(body: Any, key: str) -> int:
    value = body.get(key)
    return len(value) if isinstance(value, Sized) and not isinstance(value, str) else 0


def describe(result: ActionResult) -> str:
    """``cancelled prog-1: 2 calls aborted, 1 tool interrupted`` and the like."""
    body, pid = result.body, result.program_id
    if result.action == "cancel":
        text = f"cancelled {pid}: {_n(body, 'aborted_calls')} calls aborted"
        tools = _n(body, "interrupted_tools")
        flagged = _n(body, "flagged_tools")
        if tools:
            text += f", {tools} tools interrupted"
        if flagged:
            text += f", {flagged} side-effecting tools flagged"
        return text
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
