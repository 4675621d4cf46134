"""Small helpers shared by the table views."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text, TextType
from textual import events
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.literal import literal

Cell = str | Text
#: the fewest cells an id column gives way to before other columns are dropped
ID_MIN = 12


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


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a table laid out to the room it has by :func:`fit`."""

    key: str
    label: str
    #: right-aligned and never cut (numbers, sizes, times): a cut ``14K`` reads as ``14``
    numeric: bool = False
    #: 0: always shown; else dropped when the room is short, lowest first
    drop: int = 0


def cell_width(cell: Cell) -> int:
    """The cells ``cell`` takes on screen."""
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


def fit(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell]], room: int, padding: int
) -> list[tuple[Column, int]]:
    """The columns to show of ``rows`` in ``room`` cells (each cell padded by ``padding`` a
    side), with their widths: every column as wide as its widest cell or label, except the
    first, an id, which gives way (cut in the middle, down to :data:`ID_MIN`); when even that
    is too wide, the droppable columns go, in their order."""
    widths = [
        max([cell_len(column.label), *(cell_width(row[i]) for row in rows)])
        for i, column in enumerate(columns)
    ]
    shown = list(range(len(columns)))

    def id_room() -> int:
        return room - sum(widths[i] + 2 * padding for i in shown) + widths[0]

    for index in sorted(
        (i for i, c in enumerate(columns) if c.drop), key=lambda i: columns[i].drop
    ):
        if id_room() >= min(widths[0], ID_MIN):
            break
        shown.remove(index)
    id_width = max(min(widths[0], ID_MIN), min(widths[0], id_room()))
    return [(columns[i], id_width if i == 0 else widths[i]) for i in shown]


def show_fitted(
    table: DataTable[Cell],
    columns: Sequence[Column],
    rows: Sequence[tuple[str, Sequence[Cell]]],
    room: int,
) -> None:
    """Show ``rows`` (``(key, cells)``, a cell per column) in ``table`` laid out by :func:`fit`
    to ``room`` cells, so that the table never scrolls sideways and no number is cut: ids are
    cut in the middle, numbers right-aligned. The columns are made anew when the layout
    changes (a DataTable's column only ever widens to its cells, and drops no column)."""
    layout = fit(columns, [cells for _, cells in rows], room, table.cell_padding)
    now = [(str(key.value), column.width) for key, column in table.columns.items()]
    relaid = now != [(column.key, width) for column, width in layout]
    keep = table.cursor_row
    if relaid:
        table.clear(columns=True)
        for column, width in layout:
            label = Text(column.label, justify="right" if column.numeric else "left")
            table.add_column(label, key=column.key, width=width)
    index = {column.key: i for i, column in enumerate(columns)}

    def shown(cells: Sequence[Cell], column: Column, width: int) -> Cell:
        cell = cells[index[column.key]]
        if column.numeric:
            text = Text(cell) if isinstance(cell, str) else cell.copy()
            text.justify = "right"
            return text
        if index[column.key] == 0 and isinstance(cell, str):
            return fmt.middle(cell, width)
        return cell

    refill(table, [(key, [shown(cells, c, w) for c, w in layout]) for key, cells in rows])
    if relaid and rows:  # the rows came back in a new table: the cursor goes back to its row
        table.move_cursor(row=min(keep, len(rows) - 1), animate=False)
