"""The one-line status bar at the top: feed state, tool calls to reconcile, policy, load,
draining, server."""

from __future__ import annotations

from rich.text import Text

from agentconsole.ui.tui.state import DashboardState


def topbar(state: DashboardState, url: str, *, tenant_key: bool = False) -> Text:
    """The top line: ``agentconsole ● live cp-cache/adaptive run 24 q 5 … url``; with
    ``tenant_key`` (the server refused this key an operator route) it says the key is a
    tenant's, which is why the operator's controls are gone. Tool calls in doubt are counted
    after the feed's state (the tools view, key 7, lists them)."""
    text = Text()
    text.append("agentconsole ", style="bold")
    if tenant_key:
        text.append("tenant key ", style="bold magenta")
    if state.feed_live:
        text.append("● live ", style="bold green")
    else:
        text.append(f"○ {state.feed_detail} ", style="bold yellow")
    board = state.tool_calls
    if board is not None and board.needs_reconcile:
        # first after the feed: the one thing here that waits for the operator to act
        waiting = len(board.needs_reconcile)
        calls = "tool call" if waiting == 1 else "tool calls"
        text.append(f"{waiting} {calls} to reconcile (7) ", style="bold black on yellow")
    o = state.overview
    if o is not None:
        text.append(f"{o.policy}/{o.kv_policy} ", style="cyan")
        text.append(f"run {o.programs.get('running', 0)} ")
        text.append(f"q {o.queue_depth} ", style="dim")
        text.append(f"calls {o.running_calls} ", style="dim")
        if o.draining:
            text.append("DRAINING ", style="bold white on red")
        text.append(o.runtime + " ", style="dim")
    if url:
        text.append(url, style="dim")
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text
