"""The terminal dashboard (``agentconsole dashboard``): a Textual client of the HTTP API.

Data flows one way. :class:`DataSync` (``sync``) runs the workers: the feed worker reads the
SSE stream into a buffer and wakes the UI with a coalescing message; the poll worker reads
what the visible view needs once a second (and at once after a view switch or an action,
``polling``); actions run on workers too. The app is built of parts, each a module:

- ``frame``: the state and the workers, the views in tabs, where the operator is;
- ``polling``: when each read runs: the poll of the visible view, the slower beat of the tool
  calls the top bar counts, the re-reads a feed batch asks for;
- ``updates``: the workers' messages written into the state, the visible view redrawn;
- ``operator``: the actions on the server, what each asks first, their answers;
- here: the keys, the palette, and moving between the views.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual import on
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, TabbedContent

from agentconsole.ui.client.http import HttpConsoleClient
from agentconsole.ui.tui.commands import ProgramsProvider, system_commands
from agentconsole.ui.tui.loader import VIEWS
from agentconsole.ui.tui.operator import OperatorActions
from agentconsole.ui.tui.updates import DashboardUpdates
from agentconsole.ui.tui.views.audit import AuditView
from agentconsole.ui.tui.views.compat import CompatScreen
from agentconsole.ui.tui.views.dialogs import ConfirmScreen, HelpScreen
from agentconsole.ui.tui.views.programs import ProgramsView
from agentconsole.ui.tui.views.tenants import TenantsView
from agentconsole.ui.tui.views.toolcalls import ToolCallsView


class DashboardApp(DashboardUpdates, OperatorActions):
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

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from system_commands(self, operator=not self.sync.tenant_key)
        yield from super().get_system_commands(screen)

    # -- moving between the views -------------------------------------------------------
    @on(TabbedContent.TabActivated, "#views")
    def _view_switched(self) -> None:
        view = self.view(self.active_view)
        view.show(self.state)
        self.draw_stale()
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

    def action_view(self, name: str) -> None:
        """Show view ``name`` (closing the program screen if open)."""
        while len(self.screen_stack) > 1 and not isinstance(self.screen, ConfirmScreen):
            self.pop_screen()
        self.query_one("#views", TabbedContent).active = name

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
