"""The dashboard's frame: its state and workers, the views in tabs, and where the operator is.

:class:`DashboardFrame` is the base the dashboard's parts build on: the workers' updates
(``updates``), the operator's actions (``operator``) and the app with its keys (``app``) read
the state, find the visible view and redraw the bars through it. It starts the feed and the
poll on mount; what is read when is :class:`~agentconsole.ui.tui.polling.Polling`'s.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar, cast

from rich.text import Text
from textual.app import App, ComposeResult
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static, TabbedContent, TabPane

from agentconsole.ui.client.http import ConsoleApi
from agentconsole.ui.tui.loader import TOOLS, VIEW_READS, VIEWS, program_read
from agentconsole.ui.tui.polling import Polling
from agentconsole.ui.tui.stale import stale_line
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.sync import DataSync
from agentconsole.ui.tui.topbar import topbar
from agentconsole.ui.tui.views.audit import AuditView
from agentconsole.ui.tui.views.detail import ProgramScreen
from agentconsole.ui.tui.views.events import EventsView
from agentconsole.ui.tui.views.kv import KVView
from agentconsole.ui.tui.views.overview import OverviewView
from agentconsole.ui.tui.views.programs import ProgramsView
from agentconsole.ui.tui.views.tenants import TenantsView
from agentconsole.ui.tui.views.toolcalls import ToolCallsView

View = OverviewView | ProgramsView | TenantsView | KVView | AuditView | EventsView | ToolCallsView

_Handler = TypeVar("_Handler", bound=Callable[..., None])


def while_running(handler: _Handler) -> _Handler:
    """Drop a worker's message that is handled while the app shuts down: by then its screens
    and widgets are being removed (a query for them raises), and the data is moot."""

    @functools.wraps(handler)
    def guarded(self: App[object], message: Message) -> None:
        if self.is_running:
            handler(self, message)

    return cast(_Handler, guarded)


class Showable(Protocol):
    """A view that redraws itself from the state."""

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state``."""


class DashboardFrame(App[None]):
    """The state read from ``api``, the views in tabs under the top bar, where we are."""

    def __init__(
        self,
        api: ConsoleApi,
        *,
        url: str = "",
        feed: bool = True,
        poll_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.api = api
        self.url = url
        self.state = DashboardState()
        self.sync = DataSync(self, api, again=self.refresh_data)
        self.polling = Polling(self, poll_s)
        self.update_costs: deque[tuple[str, float]] = deque(maxlen=100_000)
        self.all_states = False
        #: wall-clock "now" (epoch seconds): the age of stale data, the end of open spans
        self.clock = clock
        self._feed_enabled = feed

    # -- layout ---------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="topbar")
        yield Static(id="stale")
        with TabbedContent(id="views", initial="overview"):
            for view, widget in zip(VIEWS, self._views(), strict=True):
                with TabPane(view.title() if view != "kv" else "KV", id=view):
                    yield widget
        # compact (one space less a key): the programs view's keys and the app's fit 80 columns
        yield Footer(compact=True)

    @staticmethod
    def _views() -> Iterable[View]:
        yield OverviewView(id="view-overview")
        yield ProgramsView(id="view-programs")
        yield TenantsView(id="view-tenants")
        yield KVView(id="view-kv")
        yield AuditView(id="view-audit")
        yield EventsView(id="view-events")
        yield ToolCallsView(id="view-tools")

    def on_mount(self) -> None:
        self.draw_topbar()
        self.sync.learn_role()
        if self._feed_enabled:
            self.sync.start_feed()
        self.refresh_data()
        self.polling.start()

    def on_unmount(self) -> None:
        self.sync.stop.set()

    def refresh_data(self) -> None:
        """Poll what is on screen now (:meth:`Polling.refresh`)."""
        self.polling.refresh()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """A toast whose text is shown verbatim unless a caller asks for markup: what the
        dashboard notifies quotes the server (its errors, ids, paths, policy names)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # -- where we are -----------------------------------------------------------------
    @property
    def active_view(self) -> str:
        """The id of the visible view tab."""
        return self.query_one("#views", TabbedContent).active or "overview"

    def view(self, name: str) -> Showable:
        """The widget of view ``name``."""
        widget = self.query_one(f"#view-{name}")
        assert isinstance(widget, View)
        return widget

    def visible_screen(self) -> Screen[object]:
        """The topmost screen that is not a dialog: what shows around any dialog open."""
        stack: list[Screen[object]] = list(self.screen_stack)
        dialogs_off = [screen for screen in stack if not isinstance(screen, ModalScreen)]
        return dialogs_off[-1] if dialogs_off else stack[0]

    def detail_screen(self) -> ProgramScreen | None:
        """The open program screen, if it is on top."""
        return self.screen if isinstance(self.screen, ProgramScreen) else None

    def selected_program(self) -> str | None:
        """The program an action applies to: the open one, else the highlighted row."""
        screen = self.detail_screen()
        if screen is not None:
            return screen.program_id
        if self.screen is self.screen_stack[0] and self.active_view == "programs":
            view = self.view("programs")
            assert isinstance(view, ProgramsView)
            return view.selected()
        return None

    def open_program(self, program_id: str) -> None:
        """Push the detail screen of ``program_id`` and load it."""
        if self.detail_screen() is not None:
            self.pop_screen()
        self.push_screen(ProgramScreen(program_id, self.clock, self.sync.cancel_node))
        self.call_after_refresh(self.refresh_data)

    # -- the bars ---------------------------------------------------------------------
    def mark_read(self, what: str) -> None:
        """Read ``what`` succeeded: it is fresh again (and its next failure is news)."""
        was_stale = what in self.state.failures
        self.state.read_succeeded(what, self.clock())
        if was_stale:
            self.draw_stale()

    def draw_stale(self) -> None:
        """Mark the visible screen stale while a read it shows failed on its last try."""
        visible = self.visible_screen()
        now = self.clock()
        if isinstance(visible, ProgramScreen):
            visible.show_stale(stale_line(self.state, (program_read(visible.program_id),), now))
            return
        line = stale_line(self.state, VIEW_READS.get(self.active_view, ()), now)
        widget = self.query_one("#stale", Static)
        widget.update(line or "")
        widget.display = line is not None

    def draw_topbar(self) -> None:
        """Redraw the top line from the state (``topbar``)."""
        bar: Text = topbar(self.state, self.url, tenant_key=self.sync.tenant_key)
        self.query_one("#topbar", Static).update(bar)

    def hide_tool_calls(self) -> None:
        """No tools tab for a key that may not read them: nothing of them, no action."""
        views = self.query_one("#views", TabbedContent)
        if views.active == TOOLS:
            views.active = "overview"
        views.hide_tab(TOOLS)
