"""The tools view: the tool calls that need an operator (``needs_reconcile``: a side effect
whose end left it in doubt, never run again by itself) and, under them, the side effects still
running (a cancel lets them finish: each ends committed, or lands in the first table).

From ``GET /v1/operator/tool-calls`` (operator key only: for a tenant key the tab is hidden and
nothing is read). Enter on a call in doubt opens its reconcile dialog (``views.reconcile``).
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from agentconsole.ui.client.toolcalls import ToolCall, ToolCallBoard
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.views.tables import Cell, Table, refill

IN_DOUBT_COLUMNS = (
    ("since", "Since (UTC)"),
    ("program", "Program"),
    ("node", "Node"),
    ("tool", "Tool"),
    ("tenant", "Tenant"),
    ("why", "Why"),
)
RUNNING_COLUMNS = (
    ("started", "Started (UTC)"),
    ("program", "Program"),
    ("node", "Node"),
    ("tool", "Tool"),
    ("tenant", "Tenant"),
)
#: the cells a reason keeps in its column (the dialog shows it whole)
WHY_CELLS = 48


def time_of_day(t: float) -> str:
    """``HH:MM:SS`` (UTC), as the audit view's times."""
    return time.strftime("%H:%M:%S", time.gmtime(t))


def _tenant(call: ToolCall) -> Cell:
    return call.tenant if call.tenant is not None else Text("?", style="dim")


def in_doubt_cells(call: ToolCall) -> list[Cell]:
    """One call in doubt: since when it waits, where it ran, whose it is and why."""
    return [
        time_of_day(call.updated_at),
        call.program_id,
        call.node_id,
        Text(call.tool, style="bold yellow"),
        _tenant(call),
        fmt.short(call.why, WHY_CELLS),
    ]


def running_cells(call: ToolCall) -> list[Cell]:
    """One side effect still running: since when, where, whose."""
    return [time_of_day(call.created_at), call.program_id, call.node_id, call.tool, _tenant(call)]


def note(board: ToolCallBoard | None) -> Text:
    """The line over the tables: how many calls wait for an operator, and what to do."""
    if board is None:
        return Text("reading the tool calls…", style="dim")
    waiting = len(board.needs_reconcile)
    if not waiting:
        return Text("No tool call waits for an operator.", style="green")
    calls = "tool call" if waiting == 1 else "tool calls"
    text = Text(f"{waiting} {calls} in doubt", style="bold yellow")
    text.append(
        ": the effect may or may not have happened, and the server never runs them again by "
        "itself. Enter on one: commit (it happened) or retry (run it once more)."
    )
    return text


class ToolCallsView(Vertical):
    """Which side effects need an operator's word, and which still run?"""

    def compose(self) -> ComposeResult:
        yield Static(id="tools-note")
        yield Table(id="reconcile-table", cursor_type="row")
        yield Table(id="effects-table", cursor_type="row")

    def on_mount(self) -> None:
        in_doubt = self.query_one("#reconcile-table", DataTable)
        in_doubt.border_title = "Needs an operator (needs_reconcile)"
        for key, header in IN_DOUBT_COLUMNS:
            in_doubt.add_column(header, key=key)
        running = self.query_one("#effects-table", DataTable)
        running.border_title = "Side effects still running"
        for key, header in RUNNING_COLUMNS:
            running.add_column(header, key=key)
        self.query_one("#tools-note", Static).update(note(None))

    @property
    def table(self) -> DataTable[Cell]:
        """The table of the calls in doubt."""
        return self.query_one("#reconcile-table", DataTable)

    def selected(self) -> str | None:
        """The id of the call in doubt under the cursor, if any."""
        table = self.table
        if not table.row_count or not 0 <= table.cursor_row < table.row_count:
            return None
        key = table.ordered_rows[table.cursor_row].key.value
        return str(key) if key is not None else None

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state``."""
        board = state.tool_calls
        self.query_one("#tools-note", Static).update(note(board))
        in_doubt = board.needs_reconcile if board is not None else ()
        running = board.running if board is not None else ()
        refill(self.table, [(c.tool_call_id, in_doubt_cells(c)) for c in in_doubt])
        effects = self.query_one("#effects-table", DataTable)
        refill(effects, [(c.tool_call_id, running_cells(c)) for c in running])
