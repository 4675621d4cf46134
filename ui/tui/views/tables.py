"""Small helpers shared by the table views."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual import events
from textual.widgets import DataTable

Cell = str | Text


class Table(DataTable[Cell]):
    """A DataTable that repaints with the right column widths after new rows are measured.

    Textual 8.2 measures new rows on idle but keys its render caches by an update counter that
    the measuring does not bump, so a frame painted between ``add_row`` and the next idle keeps
    too-narrow columns until the next change. Dropping the caches after measuring fixes that;
    only the visible lines are re-rendered, so it stays cheap.
    """

    async def _on_idle(self, event: events.Idle) -> None:
        measuring = self._require_update_dimensions or bool(self._updated_cells)
        await super()._on_idle(event)
        if measuring:
            self._clear_caches()
            self.refresh()


def refill(table: DataTable[Cell], rows: Sequence[tuple[str, Sequence[Cell]]]) -> None:
    """Replace the rows of ``table`` with ``rows`` (``(key, cells)``), keeping the cursor key.

    Skips the work when the rows are unchanged, so polls that bring nothing new cost nothing.
    """
    current = [(str(key.value), table.get_row(key)) for key in table.rows]
    wanted = [(key, list(values)) for key, values in rows]
    if current == wanted:
        return
    keep = table.cursor_row
    table.clear()
    for key, values in rows:
        table.add_row(*values, key=key)
    if rows:
        table.move_cursor(row=min(keep, len(rows) - 1), animate=False)


def percent(value: float) -> Text:
    """A share as ``42%``, red from 90 % up."""
    return Text(f"{value:.0%}", style="bold red" if value >= 0.9 else "")
