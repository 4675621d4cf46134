"""The line that marks a screen stale: one of the reads it shows failed on its last try.

The screen keeps what it last read (better than a blank), so the line says how old that is
and why it is not newer; it disappears with the next read that succeeds.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text

from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState


def stale_line(state: DashboardState, reads: Iterable[str], now: float) -> Text | None:
    """``⚠ stale tenants: read 14.0s ago · <error>`` for each of ``reads`` whose last try
    failed (``not read yet, failing 3.00s`` before any succeeded); None when all are fresh."""
    text = Text()
    for what in reads:
        failure = state.failures.get(what)
        if failure is None:
            continue
        text.append("⚠ stale " if not text else "  ", style="bold")
        text.append(f"{what}: ", style="bold")
        read_at = state.read_at.get(what)
        if read_at is None:
            text.append(f"not read yet, failing {fmt.secs(now - failure.since)}")
        else:
            text.append(f"read {fmt.secs(now - read_at)} ago")
        text.append(" · ", style="dim")
        text.append(failure.error)
    if not text:
        return None
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text
