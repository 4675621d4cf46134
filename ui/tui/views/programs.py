"""The program list: a k9s-style table with ``/`` filter, ``s``/``S`` sort and ``a`` scope.

Rows are whole pre-formatted lines (see ``program_rows``) in a one-column table under a
header line. Updates are incremental: when a poll keeps the shown rows' relative order (the
common case with the default id sort) rows are removed, rewritten only where their program
changed, and appended. The row key is the program id.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Static
from textual.widgets.data_table import RowDoesNotExist

from agentconsole.ui.client.programs import ProgramSummary
from agentconsole.ui.tui.selection import SORT_ORDER, next_sort, select
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.views.program_rows import cells, header, line, styles, widths
from agentconsole.ui.tui.views.tables import Table

# Removing a row costs O(rows) in DataTable; past this many, rebuilding is cheaper.
REMOVE_AT_MOST = 50
ROW = "row"


class ProgramsView(Vertical):
    """Programs with their scheduling state; Enter opens one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("a", "scope", "Running/all"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.query_text = ""
        self.sort = "program"
        self.reverse = False
        self.all_states = False
        self._keys: list[str] = []
        self._shown: dict[str, tuple[str, ...]] = {}
        self._rows: dict[str, ProgramSummary] = {}
        self._sizes: tuple[int, ...] = ()
        self._seen: tuple[int, str, str, bool] | None = None

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter: words (id, tenant, state, k:v); ! inverts", id="filter")
        yield Static(id="programs-header")
        yield Table(id="programs-table", cursor_type="row", show_header=False)
        yield Static(id="programs-info")

    def on_mount(self) -> None:
        self.table.add_column("", key=ROW)
        self.query_one("#filter", Input).display = False

    @property
    def table(self) -> DataTable[str | Text]:
        """The table widget."""
        return self.query_one("#programs-table", DataTable)

    def selected(self) -> str | None:
        """The program id under the cursor, if any."""
        table = self.table
        if not self._keys or table.cursor_row < 0 or table.cursor_row >= len(self._keys):
            return None
        return self._keys[table.cursor_row]

    def show(self, state: DashboardState, *, force: bool = False) -> None:
        """Bring the table in line with ``state``; cheap when little changed."""
        marker = (state.programs_version, self.query_text, self.sort, self.reverse)
        if marker == self._seen and not force:
            return
        if self._seen is not None and marker[2:] != self._seen[2:] and self._sizes:
            self._header()
        self._seen = marker
        rows = select(state.programs.values(), self.query_text, self.sort, self.reverse)
        texts = {p.program_id: self._cells(p) for p in rows}
        sizes = widths(texts.values(), max(40, self.table.size.width - 3))
        wanted = set(texts)
        kept = [k for k in self._keys if k in wanted]
        removed = len(self._keys) - len(kept)
        in_order = [p.program_id for p in rows[: len(kept)]] == kept
        if sizes == self._sizes and in_order and removed <= REMOVE_AT_MOST:
            self._patch(rows, texts, len(kept))
        else:
            self._sizes = sizes
            self._header()
            self._rebuild(rows, texts)
        self._info(state, len(rows))

    def _cells(self, p: ProgramSummary) -> tuple[str, ...]:
        before = self._rows.get(p.program_id)
        if before is p or before == p:
            return self._shown[p.program_id]
        return cells(p)

    def _header(self) -> None:
        column = SORT_ORDER.index(self.sort) if self.sort in SORT_ORDER else -1
        self.query_one("#programs-header", Static).update(header(self._sizes, column, self.reverse))

    def _patch(
        self, rows: list[ProgramSummary], texts: dict[str, tuple[str, ...]], kept: int
    ) -> None:
        table = self.table
        keep = self.selected()
        for key in self._keys:
            if key not in texts:
                table.remove_row(key)
                del self._shown[key]
                del self._rows[key]
        for p in rows[:kept]:
            if self._rows.get(p.program_id) == p:
                continue
            self._rows[p.program_id] = p
            new = texts[p.program_id]
            if new != self._shown[p.program_id]:
                self._shown[p.program_id] = new
                table.update_cell(p.program_id, ROW, line(new, styles(p), self._sizes))
        for p in rows[kept:]:
            self._rows[p.program_id] = p
            self._shown[p.program_id] = texts[p.program_id]
            table.add_row(line(texts[p.program_id], styles(p), self._sizes), key=p.program_id)
        self._keys = [p.program_id for p in rows]
        if keep in texts and self._keys[table.cursor_row : table.cursor_row + 1] != [keep]:
            table.move_cursor(row=table.get_row_index(keep), animate=False)

    def _rebuild(self, rows: list[ProgramSummary], texts: dict[str, tuple[str, ...]]) -> None:
        table = self.table
        keep = self.selected()
        table.clear()
        self._rows = {p.program_id: p for p in rows}
        self._shown = texts
        self._keys = [p.program_id for p in rows]
        for p in rows:
            table.add_row(line(texts[p.program_id], styles(p), self._sizes), key=p.program_id)
        if keep in texts:
            with contextlib.suppress(RowDoesNotExist):
                table.move_cursor(row=table.get_row_index(keep), animate=False)

    def on_resize(self) -> None:
        self.show(self._state(), force=True)

    def _info(self, state: DashboardState, shown: int) -> None:
        hidden = max(0, state.programs_total - len(state.programs))
        arrow = "↓" if self.reverse else "↑"
        scope = "all states" if self.all_states else "running"
        text = Text()
        text.append(f"{shown} shown", style="bold")
        text.append(f" of {len(state.programs)} {scope}")
        if hidden:
            text.append(f" · {hidden} hidden", style="bold yellow")
        text.append(f" · sort {self.sort} {arrow}", style="dim")
        if self.query_text:
            text.append(f" · filter {self.query_text!r}", style="cyan")
        self.query_one("#programs-info", Static).update(text)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value
        self._refresh_now()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        if not event.value:
            event.input.display = False
        self.table.focus()

    def action_sort(self) -> None:
        self.sort = next_sort(self.sort)
        self._refresh_now()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._refresh_now()

    def action_scope(self) -> None:
        self.all_states = not self.all_states
        self.post_message(self.ScopeChanged(self.all_states))

    def _state(self) -> DashboardState:
        state = getattr(self.app, "state", None)
        return state if isinstance(state, DashboardState) else DashboardState()

    def _refresh_now(self) -> None:
        self.show(self._state())

    class ScopeChanged(Message):
        """The operator switched between running programs and all programs."""

        def __init__(self, all_states: bool) -> None:
            super().__init__()
            self.all_states = all_states
