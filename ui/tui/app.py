"""The terminal dashboard (``agentconsole dashboard``): a Textual client of the HTTP API.

Data flows one way. :class:`DataSync` (``sync``) runs the workers: the feed worker reads the
SSE stream into a buffer and wakes the UI with a coalescing message; the poll worker reads
what the visible view needs once a second (and at once after a view switch or an action);
actions run on workers too. The handlers here write the :class:`DashboardState` and redraw
only the visible view.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import ClassVar, Protocol, TypeVar, cast

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from agentconsole.ui.client.http import ConsoleApi, HttpConsoleClient
from agentconsole.ui.client.toolcalls import TOOL_EVENT_KINDS
from agentconsole.ui.tui import messages as m
from agentconsole.ui.tui.commands import ProgramsProvider, system_commands
from agentconsole.ui.tui.loader import DOOR, TOOLS, VIEW_READS, VIEWS, program_read
from agentconsole.ui.tui.stale import stale_line
from agentconsole.ui.tui.state import HISTORY, DashboardState
from agentconsole.ui.tui.sync import DataSync
from agentconsole.ui.tui.topbar import topbar
from agentconsole.ui.tui.views.audit import AuditView
from agentconsole.ui.tui.views.compat import CompatScreen
from agentconsole.ui.tui.views.detail import ProgramScreen
from agentconsole.ui.tui.views.dialogs import ConfirmScreen, HelpScreen
from agentconsole.ui.tui.views.events import EventsView
from agentconsole.ui.tui.views.kv import KVView
from agentconsole.ui.tui.views.overview import OverviewView
from agentconsole.ui.tui.views.policy import PolicyChoice, PolicyScreen
from agentconsole.ui.tui.views.programs import ProgramsView
from agentconsole.ui.tui.views.reconcile import ask_reconcile
from agentconsole.ui.tui.views.replay import ReplayScreen
from agentconsole.ui.tui.views.tenants import TenantsView
from agentconsole.ui.tui.views.toolcalls import ToolCallsView

View = OverviewView | ProgramsView | TenantsView | KVView | AuditView | EventsView | ToolCallsView
#: the actions only an operator key may take (the server refuses them to a tenant's, 403): with
#: a key known to be a tenant's they leave the footer, the keys and the palette; its cancel
#: of its own program is allowed (the program's own route)
OPERATOR_ACTIONS = frozenset({"drain", "replay_window", "policy", "reconcile"})
OPERATOR_PROGRAM_ACTIONS = frozenset({"preempt", "boost"})
#: how long feed batches touching the open program gather before its detail is read again:
#: a busy program's events come every ~100 ms, a read of its detail is the whole DAG
DETAIL_RELOAD_S = 0.3
#: how often the tool calls that need an operator are read whatever the view (the top bar
#: counts them): the feed's tool events ask at once, this catches another operator's reconcile
TOOL_CALLS_POLL_S = 5.0


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


class DashboardApp(App[None]):
    """Overview, programs, program detail, tenants, KV tiers, audit and a live event tail."""

    CSS_PATH = "dashboard.tcss"
    TITLE = "agentconsole"
    COMMANDS = App.COMMANDS | {ProgramsProvider}
    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(str(i + 1), f"view('{v}')", v.title(), show=False) for i, v in enumerate(VIEWS)),
        Binding("colon", "command_palette", "Cmd", key_display=":"),
        Binding("p", "act('preempt')", "Preempt"),
        Binding("c", "act('cancel')", "Cancel"),
        Binding("b", "act('boost')", "Boost"),
        Binding("w", "replay_window", "Replay window", show=False),
        Binding("m", "model_compat", "Model compatibility", show=False),
        Binding("x", "reconcile", "Reconcile", show=False),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("r", "refresh", "Refresh", show=False),
        Binding("q", "quit", "Quit"),
    ]

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
        self.update_costs: deque[tuple[str, float]] = deque(maxlen=100_000)
        self.all_states = False
        #: wall-clock "now" (epoch seconds): the age of stale data, the end of open spans
        self.clock = clock
        self._feed_enabled = feed
        self._poll_s = poll_s
        #: the pending re-read of the open program that feed batches asked for, if any
        self._detail_reload: Timer | None = None
        #: the pending re-read of the tool calls that the feed's tool events asked for, if any
        self._tools_reload: Timer | None = None

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
        self._draw_topbar()
        self.sync.learn_role()
        if self._feed_enabled:
            self.sync.start_feed()
        self.refresh_data()
        self.set_interval(self._poll_s, self.refresh_data)
        self.set_interval(max(self._poll_s, TOOL_CALLS_POLL_S), self.sync.read_tool_calls)

    def on_unmount(self) -> None:
        self.sync.stop.set()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from system_commands(self, operator=not self.sync.tenant_key)
        yield from super().get_system_commands(screen)

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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Leave out the operator's actions once the key is known to be a tenant's (hidden
        from the footer, their keys do nothing): each would be refused and audited."""
        if not self.sync.tenant_key:
            return True
        if action in OPERATOR_ACTIONS or (action == "view" and parameters == (TOOLS,)):
            return False
        return not (action == "act" and set(parameters) & OPERATOR_PROGRAM_ACTIONS)

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

    # -- data ---------------------------------------------------------------------------
    def refresh_data(self) -> None:
        """Poll what is on screen: the open program alone while its screen covers the views
        (the list under it, up to 2000 rows, would be read for nobody), else the visible
        view, and the overview while the feed that brings it is down. Nothing while the app
        shuts down (the poll's timer may still fire, its screens gone)."""
        if not self.is_running:
            return
        visible = self.visible_screen()
        if isinstance(visible, ProgramScreen):
            self.sync.poll((), visible.program_id, self.all_states)
            return
        if visible is not self.screen_stack[0]:
            return  # a screen of its own (none today) reads what it shows itself
        wanted: tuple[str, ...] = (self.active_view,)
        if self.active_view == TOOLS:
            self.sync.read_tool_calls()  # its own worker: the top bar needs it on every view
        if not self.state.feed_live or self.state.overview is None:
            wanted = ("overview", *wanted)
        self.sync.poll(wanted, None, self.all_states)

    def _reload_detail_soon(self) -> None:
        """Read the open program again once the feed batches of the next moment are in: one
        read for a burst of them, not one each."""
        if self._detail_reload is None:
            self._detail_reload = self.set_timer(DETAIL_RELOAD_S, self._reload_detail)

    def _reload_detail(self) -> None:
        self._detail_reload = None
        # a timer may fire while the app shuts down, its screens already gone
        if self.is_running and isinstance(self.visible_screen(), ProgramScreen):
            self.refresh_data()

    # -- freshness --------------------------------------------------------------------
    def _read(self, what: str) -> None:
        """Read ``what`` succeeded: it is fresh again (and its next failure is news)."""
        was_stale = what in self.state.failures
        self.state.read_succeeded(what, self.clock())
        if was_stale:
            self._draw_stale()

    def _draw_stale(self) -> None:
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

    # -- message handlers -----------------------------------------------------------------
    def _timed(self, kind: str, start: float) -> None:
        self.update_costs.append((kind, time.perf_counter() - start))

    @on(m.FeedPending)
    @while_running
    def _feed_pending(self, _: m.FeedPending) -> None:
        start = time.perf_counter()
        events = self.sync.buffer.drain()
        touched = self.state.apply_events(events)
        if self.screen is self.screen_stack[0]:
            if self.active_view == "events":
                view = self.view("events")
                assert isinstance(view, EventsView)
                view.append(events)
            elif self.active_view == "programs":
                self.view("programs").show(self.state)
        screen = self.visible_screen()
        if isinstance(screen, ProgramScreen) and screen.program_id in touched:
            self._reload_detail_soon()
        if self._tools_reload is None and any(e.kind in TOOL_EVENT_KINDS for e in events):
            # a tool ended (in doubt, perhaps) or a side effect started: one read for a burst
            self._tools_reload = self.set_timer(DETAIL_RELOAD_S, self._reload_tool_calls)
        self._timed("feed", start)

    def _reload_tool_calls(self) -> None:
        self._tools_reload = None
        if self.is_running:
            self.sync.read_tool_calls()

    @on(m.FeedChanged)
    @while_running
    def _feed_changed(self, message: m.FeedChanged) -> None:
        self.state.set_feed(message.live, message.detail)
        self._draw_topbar()

    @on(m.OverviewLoaded)
    @while_running
    def _overview_loaded(self, message: m.OverviewLoaded) -> None:
        start = time.perf_counter()
        self._read("overview")
        self.state.set_overview(message.overview, sample=message.tick)
        self._draw_topbar()
        if self.active_view == "overview":
            self.view("overview").show(self.state)
        self._timed("overview", start)

    @on(m.ProgramsLoaded)
    @while_running
    def _programs_loaded(self, message: m.ProgramsLoaded) -> None:
        start = time.perf_counter()
        self._read("programs")
        self.state.set_programs(message.page)
        if self.active_view == "programs":
            self.view("programs").show(self.state)
        self._timed("programs", start)

    @on(m.ProgramLoaded)
    @while_running
    def _program_loaded(self, message: m.ProgramLoaded) -> None:
        start = time.perf_counter()
        self._read(program_read(message.detail.summary.program_id))
        # the screen the poll read it for: a dialog over it does not make the read a waste
        screen = self.visible_screen()
        if (
            isinstance(screen, ProgramScreen)
            and screen.program_id == message.detail.summary.program_id
        ):
            self.state.set_detail(message.detail)
            screen.show(message.detail)
        self._timed("program", start)

    @on(m.TenantsLoaded)
    @while_running
    def _tenants_loaded(self, message: m.TenantsLoaded) -> None:
        self._read("tenants")
        self.state.tenants = message.tenants
        if self.active_view == "tenants":
            self.view("tenants").show(self.state)

    @on(m.DoorLoaded)
    @while_running
    def _door_loaded(self, message: m.DoorLoaded) -> None:
        self._read(DOOR)
        self.state.door = message.door
        if self.active_view == "tenants":
            self.view("tenants").show(self.state)

    @on(m.ToolCallsLoaded)
    @while_running
    def _tool_calls_loaded(self, message: m.ToolCallsLoaded) -> None:
        self._read(TOOLS)
        self.state.tool_calls = message.board
        self._draw_topbar()
        if self.active_view == TOOLS:
            self.view(TOOLS).show(self.state)

    @on(m.ReadRefused)
    @while_running
    def _read_refused(self, message: m.ReadRefused) -> None:
        # a tenant key simply has no door to see (its section hides) nor tool calls (their
        # tab hides); the audit view says once why it stays empty
        self._read(message.what)  # an answer all the same: what it shows is not stale
        if message.what == DOOR:
            self.state.door = None
            if self.active_view == "tenants":
                self.view("tenants").show(self.state)
        elif message.what == TOOLS:
            self.state.tool_calls = None
            self._hide_tool_calls()
        elif message.status == 401:
            self.notify(
                f"the server refused this key ({message.reason}): the {message.what} log is "
                "not asked for again; restart the dashboard with an operator key",
                severity="error",
            )
        else:
            self.notify(f"the {message.what} log is the operator's: {message.reason}")

    @on(m.TenantKeyFound)
    @while_running
    def _tenant_key_found(self, _: m.TenantKeyFound) -> None:
        # the footer drops the operator's keys and the top bar says why; no toast: a
        # tenant's key is no error (a refused action has said so already)
        self.refresh_bindings()
        self._hide_tool_calls()
        self._draw_topbar()

    def _hide_tool_calls(self) -> None:
        """No tools tab for a key that may not read them: nothing of them, no action."""
        views = self.query_one("#views", TabbedContent)
        if views.active == TOOLS:
            views.active = "overview"
        views.hide_tab(TOOLS)

    @on(m.KVLoaded)
    @while_running
    def _kv_loaded(self, message: m.KVLoaded) -> None:
        self._read("kv")
        self.state.kv = message.kv
        if self.active_view == "kv":
            self.view("kv").show(self.state)

    @on(m.AuditLoaded)
    @while_running
    def _audit_loaded(self, message: m.AuditLoaded) -> None:
        self._read("audit")
        self.state.audit = message.actions
        if self.active_view == "audit":
            self.view("audit").show(self.state)

    @on(m.LoadFailed)
    @while_running
    def _load_failed(self, message: m.LoadFailed) -> None:
        # reported once per outage (each poll repeats it), again once it recovered and fails
        # anew; meanwhile the screen says its data is stale, and how old it is
        if self.state.read_failed(message.what, message.error, self.clock()):
            self.notify(message.error, title=f"cannot load {message.what}", severity="error")
        self._draw_stale()

    @on(m.ActionDone)
    @while_running
    def _action_done(self, message: m.ActionDone) -> None:
        self.notify(
            message.text, title=message.action, severity="information" if message.ok else "error"
        )
        self.refresh_data()
        if message.action == "reconcile":  # the top bar's count, whatever the view
            self.sync.read_tool_calls()

    @on(m.ReplayWritten)
    @while_running
    def _replay_written(self, message: m.ReplayWritten) -> None:
        replay = message.replay
        if replay.empty:
            self.notify(replay.message, title="replay this window", severity="warning")
            return
        self.notify(f"{replay.programs} programs -> {replay.path}", title="replay this window")
        self.push_screen(ReplayScreen(replay, message.span_s))

    @on(TabbedContent.TabActivated, "#views")
    def _view_switched(self) -> None:
        view = self.view(self.active_view)
        view.show(self.state)
        self._draw_stale()
        if isinstance(view, ProgramsView | TenantsView | AuditView | ToolCallsView):
            view.query_one(DataTable).focus()
        self.refresh_data()

    @on(ProgramsView.ScopeChanged)
    def _scope_changed(self, message: ProgramsView.ScopeChanged) -> None:
        self.all_states = message.all_states
        self.refresh_data()

    @on(DataTable.RowSelected, "#programs-table")
    def _row_selected(self, message: DataTable.RowSelected) -> None:
        if message.row_key.value is not None:
            self.open_program(message.row_key.value)

    @on(DataTable.RowSelected, "#reconcile-table")
    def _tool_call_selected(self, message: DataTable.RowSelected) -> None:
        if message.row_key.value is not None:
            self.reconcile_tool_call(message.row_key.value)

    def _draw_topbar(self) -> None:
        bar: Text = topbar(self.state, self.url, tenant_key=self.sync.tenant_key)
        self.query_one("#topbar", Static).update(bar)

    # -- actions -----------------------------------------------------------------------
    def open_program(self, program_id: str) -> None:
        """Push the detail screen of ``program_id`` and load it."""
        if self.detail_screen() is not None:
            self.pop_screen()
        self.push_screen(ProgramScreen(program_id, self.clock, self.sync.cancel_node))
        self.call_after_refresh(self.refresh_data)

    def action_view(self, name: str) -> None:
        """Show view ``name`` (closing the program screen if open)."""
        while len(self.screen_stack) > 1 and not isinstance(self.screen, ConfirmScreen):
            self.pop_screen()
        self.query_one("#views", TabbedContent).active = name

    def action_act(self, action: str) -> None:
        """Preempt, boost or (after confirmation) cancel the selected program."""
        program_id = self.selected_program()
        if program_id is None:
            self.notify("select a program first (2: programs)", severity="warning")
            return
        if action != "cancel":
            self.sync.act(action, program_id)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.sync.act("cancel", program_id)

        question = Text.assemble(
            "Cancel program ",
            (program_id, "bold"),
            "?\n\nIts running calls are aborted, pending nodes dropped and KV reclaimed. "
            "This cannot be undone.",
        )
        self.push_screen(ConfirmScreen(question, "Cancel program"), answered)

    def action_drain(self, enabled: bool) -> None:
        """Stop (after confirmation, as a cancel) or resume admitting new calls."""
        if not enabled:
            self.sync.drain(False)  # resuming admits calls again: nothing to undo
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.sync.drain(True)

        # the server refuses at once (503 ``draining``, Retry-After), it does not hold calls:
        # running agents see errors on their next call, which the operator must know first
        question = Text(
            "Drain: stop admitting new calls?\n\nNew calls from every tenant are refused (503, "
            "retry later) until the drain ends, the next call of running programs included; "
            "calls already admitted continue. Remembered across a server restart."
        )
        self.push_screen(ConfirmScreen(question, "Drain"), answered)

    def action_policy(self) -> None:
        """Switch the scheduling and/or the tool-wait KV policy: the server's names are read
        first, and the dialog opens once they come (:meth:`_policy_choices_loaded`)."""
        self.sync.load_policy_choices()

    @on(m.PolicyChoicesLoaded)
    @while_running
    def _policy_choices_loaded(self, message: m.PolicyChoicesLoaded) -> None:
        choices = message.choices
        overview = self.state.overview
        if choices is not None:  # the server's answer is newer than the last overview
            policy, kv_policy = choices.policy, choices.kv_policy
        else:
            policy, kv_policy = (overview.policy, overview.kv_policy) if overview else ("", "")

        def answered(picked: PolicyChoice | None) -> None:
            if picked is not None:
                self.sync.set_policy(picked.policy, picked.kv_policy)

        self.push_screen(PolicyScreen(policy, kv_policy, choices), answered)

    def action_reconcile(self) -> None:
        """Reconcile the tool call in doubt under the tools view's cursor."""
        view = self.view(TOOLS)
        assert isinstance(view, ToolCallsView)
        selected = view.selected() if self.active_view == TOOLS else None
        self.reconcile_tool_call(selected or "")

    def reconcile_tool_call(self, tool_call_id: str) -> None:
        """Ask what to record for a call in doubt (commit with its result, or retry), confirm
        it, and send it; the notice says what the server did, or why it refused."""
        board = self.state.tool_calls
        call = board.find(tool_call_id) if board is not None else None
        if call is None or self.sync.tenant_key:
            self.notify("select a tool call in doubt first (7: tools)", severity="warning")
            return
        ask_reconcile(self, call, self.sync.reconcile)

    def action_replay_window(self) -> None:
        """Write the traffic of the sparklines' window (their ``HISTORY`` one-second samples,
        until now) as a trace on the server, and show its path and bench command."""
        self.sync.replay(HISTORY)

    def action_model_compat(self) -> None:
        """Open the served models' KV compatibility matrix."""
        self.push_screen(CompatScreen(self.api))

    def action_refresh(self) -> None:
        """Poll now."""
        self.refresh_data()

    def action_help(self) -> None:
        """Show the key reference."""
        self.push_screen(HelpScreen())


def run_dashboard(url: str, key: str) -> None:
    """Run the terminal dashboard against the server at ``url`` with API key ``key``.

    Blocks until the operator quits. Requires a terminal; works with any key (a tenant key
    sees only its tenant; once the server refuses it an operator route, 403, the operator's
    controls hide, and ``c`` still cancels its own programs).
    """
    client = HttpConsoleClient(url, key)
    try:
        DashboardApp(client, url=url).run()
    finally:
        client.close()
