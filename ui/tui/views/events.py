"""The live event tail: the newest feed events, written only while the view is visible."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog

from agentconsole.ui.client.models import FeedEvent
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState

# More lines than a screen holds are never looked at live; older ones stay in the log.
WRITE_AT_MOST = 200
KIND_STYLES = {
    "program": "bold",
    "call": "green",
    "tool": "magenta",
    "kv": "blue",
    "operator": "bold red",
    "policy": "bold cyan",
    "node": "dim",
}


def line(event: FeedEvent) -> Text:
    """One event as a single line."""
    text = Text()
    text.append(fmt.clock(event.t), style="dim")
    style = KIND_STYLES.get(event.kind.partition(".")[0], "")
    text.append(f" {event.kind:<17}", style=style)
    text.append(f" {event.program_id}")
    if event.node_id:
        text.append(f"/{event.node_id}", style="cyan")
    if event.tenant:
        text.append(f" {event.tenant}", style="dim")
    if event.data:
        text.append(f" {event.data}", style="dim")
    return text


class EventsView(Vertical):
    """A tail of the SSE feed."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._written = 0

    def compose(self) -> ComposeResult:
        yield RichLog(id="events-log", max_lines=1000, wrap=False, auto_scroll=True)

    def append(self, events: Iterable[FeedEvent]) -> None:
        """Write new events (the newest :data:`WRITE_AT_MOST` of them)."""
        fresh = list(events)
        log = self.query_one(RichLog)
        skipped = len(fresh) - WRITE_AT_MOST
        if skipped > 0:
            log.write(Text(f"… {skipped} events not shown", style="dim italic"))
            fresh = fresh[-WRITE_AT_MOST:]
        for event in fresh:
            log.write(line(event))
        self._written += len(fresh)

    def show(self, state: DashboardState) -> None:
        """Rewrite the log from the state's tail (on first show, or after being hidden)."""
        log = self.query_one(RichLog)
        log.clear()
        self._written = 0
        self.append(list(state.events)[-WRITE_AT_MOST:])
