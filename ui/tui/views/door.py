"""The admission door on the tenants view: its counts (on or off and its order, who waits,
the started programs' predicted tokens against its budget, what they hold now, boundary
parks) and what it learned (each tenant's kinds' runs, each kind's peak private tokens).

From ``GET /v1/operator/door``; hidden until read, and for a tenant key (the server refuses
it: it shows every tenant's figures).
"""

from __future__ import annotations

from rich.table import Table as Grid
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from agentconsole.ui.client.door import Door, LearnedKind
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.views.tables import Cell, Table, refill

COLUMNS = ("tenant", "kind", "expected run", "peak tokens")


def _budget(door: Door) -> Text:
    """Predicted tokens against the budget; red once they fill it (the door then holds
    newcomers back unless an engine slot would idle)."""
    if door.budget_tokens is None:
        return Text("not sized", style="dim")
    shown = f"{fmt.count(door.predicted_tokens)} / {fmt.count(door.budget_tokens)}"
    fill = door.fill
    if fill is None:  # a budget of 0: nothing to take a share of
        return Text(shown)
    return Text(f"{shown} {fill:.0%}", style="bold red" if fill >= 1 else "")


def counts(door: Door) -> Grid:
    """The door's counts, two pairs a row (fits 80 columns)."""
    grid = Grid.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    on = Text(f"on, {door.order}", style="green") if door.enabled else Text("off", style="yellow")
    waiting = Text(str(door.waiting), style="bold yellow" if door.waiting else "")
    grid.add_row("door", on, "waiting", waiting)
    grid.add_row("predicted", _budget(door), "waited total", str(door.waited_total))
    held = fmt.count(door.held_tokens)
    grid.add_row("held now", held, "boundary parks", str(door.boundary_parks))
    grid.add_row("shared room", fmt.count(door.reserved_tokens), "", "")
    return grid


def cells(row: LearnedKind) -> list[Cell]:
    """One learned kind: its tenant, run and peak (``-`` where not learned)."""
    dash = Text("-", style="dim")
    return [
        row.tenant,
        row.kind,
        fmt.secs(row.expected_run_s) if row.expected_run_s is not None else dash,
        fmt.count(round(row.peak_tokens)) if row.peak_tokens is not None else dash,
    ]


def row_key(row: LearnedKind) -> str:
    """A key unique per (tenant, kind): NUL cannot occur in either name."""
    return f"{row.tenant}\0{row.kind}"


class DoorPanel(Vertical):
    """Is the door holding programs back, and what does it expect of each kind?"""

    def compose(self) -> ComposeResult:
        yield Static(id="door-counts", classes="panel")
        yield Table(id="door-table", cursor_type="row")

    def on_mount(self) -> None:
        self.query_one("#door-counts").border_title = "Admission door"
        table = self.query_one("#door-table", DataTable)
        table.border_title = "Learned: each kind's run and peak"
        for column in COLUMNS:
            table.add_column(column.title(), key=column)
        self.display = False  # until the first read: a tenant key never sees it

    def show(self, door: Door | None) -> None:
        """Redraw from ``door``; hide the panel when there is none."""
        self.display = door is not None
        if door is None:
            return
        self.query_one("#door-counts", Static).update(counts(door))
        rows = [(row_key(r), cells(r)) for r in door.learned()]
        refill(self.query_one("#door-table", DataTable), rows)
