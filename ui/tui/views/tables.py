"""Small helpers shared by the table views."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text, TextType
from textual import events
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from agentconsole.ui.tui.literal import literal

Cell = str | Text


class Table(DataTable[Cell]):
    """A DataTable whose ``str`` cells are shown verbatim, and that repaints with the right
    column widths after new rows are measured.

    DataTable reads a ``str`` cell as Rich markup; the cells here are mostly the server's
    strings (ids, labels, tenants, audit targets), so every one is made literal on its way in
    (:func:`~agentconsole.ui.tui.literal.literal`): no view can forget it.

    Textual 8.2 measures new rows on idle but keys its render caches by an update counter that
    the measuring does not bump, so a frame painted between ``add_row`` and the next idle keeps
    too-narrow columns until the next change. Dropping the caches after measuring fixes that;
    only the visible lines are re-rendered, so it stays cheap.
    """

    def add_row(
        self,
        *cells: Cell,
        height: int | None = 1,
        key: str | None = None,
        label: TextType | None = None,
    ) -> RowKey:
        return super().add_row(
            *(literal(cell) for cell in cells), height=height, key=key, label=label
        )

    def update_cell(
        self,
        row_key: RowKey | str,
        column_key: ColumnKey | str,
        value: Cell,
        *,
        update_width: bool = False,
    ) -> None:
        super().update_cell(row_key, column_key, literal(value), update_width=update_width)

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
    # as a :class:`Table` holds them (a str cell and its Text never compare equal)
    wanted = [(key, [literal(value) for value in values]) for key, values in rows]
    if current == wanted:
        return
    keep = table.cursor_row
    table.clear()
    for key, values in wanted:
        table.add_row(*values, key=key)
    if rows:
        table.move_cursor(row=min(keep, len(rows) - 1), animate=False)


def percent(value: float) -> Text:
    """A share as ``42%``, red from 90 % up."""
    return Text(f"{value:.0%}", style="bold red" if value >= 0.9 else "")
