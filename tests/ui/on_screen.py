"""What a dashboard shows, read the same way by every TUI test that looks."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.dialogs import ConfirmScreen
from agentconsole.ui.tui.views.programs import ProgramsView


def confirming(app: DashboardApp) -> bool:
    """Whether a confirmation is on top (a function, so mypy does not narrow)."""
    return isinstance(app.screen, ConfirmScreen)


def program_ids_shown(view: ProgramsView) -> list[str]:
    """The program of each row of the list, top to bottom."""
    out = []
    for key in view.table.rows:
        cell = view.table.get_row(key)[0]
        assert isinstance(cell, Text)
        out.append(cell.plain.split()[0])
    return out


def painted(widget: Widget) -> str:
    """The text ``widget`` paints now, line by line."""
    return "\n".join(widget.render_line(y).text for y in range(widget.size.height))
