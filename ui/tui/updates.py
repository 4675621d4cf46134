"""The workers' data, written into the dashboard: each message updates the state, then redraws
only what is visible.

The feed worker and the poll (``sync``) post typed messages (``messages``); the handlers here
run on the UI thread, drop what arrives while the app shuts down (:func:`while_running`) and
time themselves into ``update_costs`` (what ``benchmarks/bench_console.py`` reports). A read
that succeeds makes its data fresh again; one that fails marks the screen stale.
"""

from __future__ import annotations

import time

from textual import on

from agentconsole.ui.tui import messages as m
from agentconsole.ui.tui.frame import DashboardFrame, while_running
from agentconsole.ui.tui.loader import DOOR, TOOLS, program_read
from agentconsole.ui.tui.views.detail import ProgramScreen
from agentconsole.ui.tui.views.events import EventsView


class DashboardUpdates(DashboardFrame):
    """The handlers of the feed's and the poll's messages."""

    def _timed(self, kind: str, start: float) -> None:
        self.update_costs.append((kind, time.perf_counter() - start))

    def _redraw_if_shown(self, name: str) -> None:
        """Redraw view ``name`` from the state if it is the one on screen (the others draw
        when shown)."""
        if self.active_view == name:
            self.view(name).show(self.state)

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
        self.polling.feed_read(events, touched)
        self._timed("feed", start)

    @on(m.FeedChanged)
    @while_running
    def _feed_changed(self, message: m.FeedChanged) -> None:
        self.state.set_feed(message.live, message.detail)
        self.draw_topbar()

    @on(m.OverviewLoaded)
    @while_running
    def _overview_loaded(self, message: m.OverviewLoaded) -> None:
        start = time.perf_counter()
        self.mark_read("overview")
        self.state.set_overview(message.overview, sample=message.tick)
        self.draw_topbar()
        self._redraw_if_shown("overview")
        self._timed("overview", start)

    @on(m.ProgramsLoaded)
    @while_running
    def _programs_loaded(self, message: m.ProgramsLoaded) -> None:
        start = time.perf_counter()
        self.mark_read("programs")
        self.state.set_programs(message.page)
        self._redraw_if_shown("programs")
        self._timed("programs", start)

    @on(m.ProgramLoaded)
    @while_running
    def _program_loaded(self, message: m.ProgramLoaded) -> None:
        start = time.perf_counter()
        self.mark_read(program_read(message.detail.summary.program_id))
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
        self.mark_read("tenants")
        self.state.tenants = message.tenants
        self._redraw_if_shown("tenants")

    @on(m.DoorLoaded)
    @while_running
    def _door_loaded(self, message: m.DoorLoaded) -> None:
        self.mark_read(DOOR)
        self.state.door = message.door
        self._redraw_if_shown("tenants")

    @on(m.ToolCallsLoaded)
    @while_running
    def _tool_calls_loaded(self, message: m.ToolCallsLoaded) -> None:
        self.mark_read(TOOLS)
        self.state.tool_calls = message.board
        self.draw_topbar()
        self._redraw_if_shown(TOOLS)

    @on(m.KVLoaded)
    @while_running
    def _kv_loaded(self, message: m.KVLoaded) -> None:
        self.mark_read("kv")
        self.state.kv = message.kv
        self._redraw_if_shown("kv")

    @on(m.AuditLoaded)
    @while_running
    def _audit_loaded(self, message: m.AuditLoaded) -> None:
        self.mark_read("audit")
        self.state.audit = message.actions
        self._redraw_if_shown("audit")

    @on(m.ReadRefused)
    @while_running
    def _read_refused(self, message: m.ReadRefused) -> None:
        # a tenant key simply has no door to see (its section hides) nor tool calls (their
        # tab hides); the audit view says once why it stays empty
        self.mark_read(message.what)  # an answer all the same: what it shows is not stale
        if message.what == DOOR:
            self.state.door = None
            self._redraw_if_shown("tenants")
        elif message.what == TOOLS:
            self.state.tool_calls = None
            self.hide_tool_calls()
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
        self.hide_tool_calls()
        self.draw_topbar()

    @on(m.LoadFailed)
    @while_running
    def _load_failed(self, message: m.LoadFailed) -> None:
        # reported once per outage (each poll repeats it), again once it recovered and fails
        # anew; meanwhile the screen says its data is stale, and how old it is
        if self.state.read_failed(message.what, message.error, self.clock()):
            self.notify(message.error, title=f"cannot load {message.what}", severity="error")
        self.draw_stale()
