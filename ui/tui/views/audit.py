"""The audit view: every operator action, newest first."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.views.tables import Cell, Table, refill

ACTION_STYLES = {"cancel": "bold red", "preempt": "yellow", "boost": "cyan", "drain": "magenta"}


class AuditView(Vertical):
    """Who did what to which program, and what came of it."""

    def compose(self) -> ComposeResult:
        table = Table(id="audit-table", cursor_type="row")
        yield table

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for column in ("time", "actor", "action", "target", "args", "result"):
            table.add_column(column.title(), key=column)

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state``."""
        rows: list[tuple[str, list[Cell]]] = [
            (
                f"{i}",
                [
                    fmt.clock(a.ts),
                    a.actor,
                    Text(a.action, style=ACTION_STYLES.get(a.action, "")),
                    a.target,
                    fmt.short(a.args, 24),
                    fmt.short(a.result, 24),
                ],
            )
            for i, a in enumerate(state.audit)
        ]
        refill(self.query_one(DataTable), rows)
