"""When the dashboard reads: the poll of what is on screen, and the re-reads the feed asks for.

The poll runs every ``poll_s`` (and at once after a view switch or an action) and reads only
what the visible screen shows; the tool calls the top bar counts are read on a slower beat of
their own. A feed batch that touches the open program, or holds a tool event, asks for a
re-read that waits :data:`DETAIL_RELOAD_S` for the batches after it: one read for a burst.
Every read itself runs on a :class:`~agentconsole.ui.tui.sync.DataSync` worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from textual.timer import Timer

from agentconsole.ui.client.models import FeedEvent
from agentconsole.ui.client.toolcalls import TOOL_EVENT_KINDS
from agentconsole.ui.tui.loader import TOOLS
from agentconsole.ui.tui.views.detail import ProgramScreen

if TYPE_CHECKING:
    from agentconsole.ui.tui.frame import DashboardFrame

#: how long feed batches touching the open program gather before its detail is read again:
#: a busy program's events come every ~100 ms, a read of its detail is the whole DAG
DETAIL_RELOAD_S = 0.3
#: how often the tool calls that need an operator are read whatever the view (the top bar
#: counts them): the feed's tool events ask at once, this catches another operator's reconcile
TOOL_CALLS_POLL_S = 5.0


class Polling:
    """The read schedule of ``app``: its periodic poll and the coalesced re-reads."""

    def __init__(self, app: DashboardFrame, poll_s: float) -> None:
        self.app = app
        self.poll_s = poll_s
        #: the pending re-read of the open program that feed batches asked for, if any
        self._detail_reload: Timer | None = None
        #: the pending re-read of the tool calls that the feed's tool events asked for, if any
        self._tools_reload: Timer | None = None

    def start(self) -> None:
        """Start the app's timers: the poll every ``poll_s``, the tool calls every
        :data:`TOOL_CALLS_POLL_S` (never more often than the poll)."""
        self.app.set_interval(self.poll_s, self.refresh)
        self.app.set_interval(max(self.poll_s, TOOL_CALLS_POLL_S), self.app.sync.read_tool_calls)

    def refresh(self) -> None:
        """Poll what is on screen: the open program alone while its screen covers the views
        (the list under it, up to 2000 rows, would be read for nobody), else the visible
        view, and the overview while the feed that brings it is down. Nothing while the app
        shuts down (the poll's timer may still fire, its screens gone)."""
        app = self.app
        if not app.is_running:
            return
        visible = app.visible_screen()
        if isinstance(visible, ProgramScreen):
            app.sync.poll((), visible.program_id, app.all_states)
            return
        if visible is not app.screen_stack[0]:
            return  # a screen of its own (none today) reads what it shows itself
        wanted: tuple[str, ...] = (app.active_view,)
        if app.active_view == TOOLS:
            app.sync.read_tool_calls()  # its own worker: the top bar needs it on every view
        if not app.state.feed_live or app.state.overview is None:
            wanted = ("overview", *wanted)
        app.sync.poll(wanted, None, app.all_states)

    def feed_read(self, events: Sequence[FeedEvent], touched: set[str]) -> None:
        """Schedule the re-reads a feed batch asks for (``touched``: the programs its
        ``events`` concern), each once for a burst of batches, not once each: the open
        program if the batch touched it, the tool calls if a tool ended (in doubt, perhaps)
        or a side effect started."""
        screen = self.app.visible_screen()
        opened = isinstance(screen, ProgramScreen) and screen.program_id in touched
        if opened and self._detail_reload is None:
            self._detail_reload = self.app.set_timer(DETAIL_RELOAD_S, self.reload_detail)
        if self._tools_reload is None and any(e.kind in TOOL_EVENT_KINDS for e in events):
            self._tools_reload = self.app.set_timer(DETAIL_RELOAD_S, self.reload_tool_calls)

    def reload_detail(self) -> None:
        """Read the open program again (the pending re-read's timer fired)."""
        self._detail_reload = None
        # a timer may fire while the app shuts down, its screens already gone
        if self.app.is_running and isinstance(self.app.visible_screen(), ProgramScreen):
            self.refresh()

    def reload_tool_calls(self) -> None:
        """Read the tool calls again (the pending re-read's timer fired)."""
        self._tools_reload = None
        if self.app.is_running:
            self.app.sync.read_tool_calls()
