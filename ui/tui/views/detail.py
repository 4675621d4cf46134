"""The program detail screen: summary, layered DAG with the critical path, node timelines."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from agentconsole.ui.client.programs import ProgramDetail
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.graph import drawn_now, legend, render_dag, span, timeline_bar
from agentconsole.ui.tui.literal import literal
from agentconsole.ui.tui.views.tables import Table

NODE_COLUMNS = ("node", "kind", "state", "kv", "queue", "service", "tool", "timeline")
NODE_LABELS = ("Node", "Kind", "State", "KV now", "Queue", "Service", "Tool", "Timeline")
FIXED_WIDTH = 62  # the columns before the timeline bar, with cell padding
ZOOM_ROWS = 20  # the zoom window before the table has been laid out


def summary(detail: ProgramDetail) -> Text:
    """Two lines of program facts, each cut with an ellipsis on narrow terminals."""
    s = detail.summary
    kv = " ".join(
        f"{name.removesuffix('_tokens')} {fmt.count(v)}" for name, v in detail.kv.items() if v
    )
    first = Text()
    first.append(s.program_id, style="bold")
    first.append(f" {s.tenant} ")
    first.append_text(fmt.state(s.state))
    second = Text()
    for label, value in (
        ("nodes", f"{s.nodes_done}/{s.nodes_known}"),
        ("service", fmt.secs(s.attained_service_s)),
        ("prio", s.priority),
        ("cp idle", fmt.secs(s.critical_path_idle_s)),
        ("slack", fmt.secs(s.deadline_slack_s)),
        ("tokens", fmt.count(s.tokens_used)),
        ("kv", kv or "-"),
        ("lost reuse", fmt.count(detail.lost_reuse_tokens)),
    ):
        target = first if label in ("nodes", "service", "prio") else second
        target.append(f"  {label} " if target is first else f"{label} ", style="dim")
        target.append(value + ("" if target is first else "  "))
    text = Text("\n").join([first, second])
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class ProgramScreen(Screen[None]):
    """One program; ``p``/``c``/``b`` act on it (bound by the app), Escape goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("t", "toggle_tab", "DAG/Timeline"),
        Binding("z", "zoom", "Zoom bars"),
    ]

    def __init__(self, program_id: str, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.program_id = program_id
        self.detail: ProgramDetail | None = None
        self.zoom = False
        self._window: tuple[float, float] = (0.0, 1.0)
        #: what "now" is for the spans still open (the app's clock, injectable for tests)
        self._clock = clock

    def compose(self) -> ComposeResult:
        yield Static(literal(f"loading {self.program_id}…"), id="detail-summary")
        yield Static(id="detail-stale")
        with TabbedContent(id="detail-tabs"):
            with TabPane("DAG", id="tab-dag"), VerticalScroll(id="dag-scroll"):
                yield Static(id="dag")
            with TabPane("Timeline", id="tab-timeline"):
                table = Table(id="nodes-table", cursor_type="row")
                yield table
        yield Static(id="node-model")
        yield Static(legend(), id="detail-legend")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#nodes-table", DataTable)
        for column, label in zip(NODE_COLUMNS, NODE_LABELS, strict=True):
            table.add_column(label, key=column)

    def action_toggle_tab(self) -> None:
        tabs = self.query_one(TabbedContent)
        tabs.active = "tab-timeline" if tabs.active == "tab-dag" else "tab-dag"

    def show(self, detail: ProgramDetail) -> None:
        """Redraw everything from ``detail``; an unchanged one with spans still open redraws
        only the bars, which grow with time although the server's answer did not change."""
        if detail == self.detail:
            if detail.running_spans:
                self._rescale(always=True)
            return
        self.detail = detail
        self.query_one("#detail-summary", Static).update(summary(detail))
        width = max(30, self.size.width - 4)
        self.query_one("#dag", Static).update(render_dag(detail, width))
        self._timeline(detail)
        self._node_model()
        if self.zoom:
            self.call_after_refresh(self._rescale)

    def show_stale(self, line: Text | None) -> None:
        """Mark the detail as stale (its last read failed) with ``line``; None clears it."""
        widget = self.query_one("#detail-stale", Static)
        widget.update(line or "")
        widget.display = line is not None

    def action_zoom(self) -> None:
        """Scale the bars to the page of nodes around the cursor (or back to the whole run)."""
        self.zoom = not self.zoom
        self._rescale()
        self.call_after_refresh(self._rescale)  # again once the table has its size
        self.notify("bars scaled to the nodes on screen" if self.zoom else "bars span the run")

    @on(DataTable.RowHighlighted, "#nodes-table")
    def _moved(self) -> None:
        self._node_model()
        if self.zoom:
            self._rescale()

    def _node_model(self) -> None:
        """Which model ran the node under the cursor and why (several models served)."""
        detail = self.detail
        row = self.query_one("#nodes-table", DataTable).cursor_row
        node = detail.nodes[row] if detail is not None and 0 <= row < len(detail.nodes) else None
        line = Text()
        if node is not None and node.model is not None:
            line.append(f"{node.node_id} ran on ", style="dim")
            line.append(node.model, style="bold cyan")
            if node.model_reason:
                line.append(f": {node.model_reason}", style="dim")
        widget = self.query_one("#node-model", Static)
        widget.update(line)
        widget.display = bool(line.plain)

    def _scale(self, detail: ProgramDetail, now: float) -> tuple[float, float]:
        """The time window of the bars: the run, or the rows the table shows now."""
        if not self.zoom or not detail.nodes:
            return span(detail, now)
        table = self.query_one("#nodes-table", DataTable)
        rows = max(1, table.size.height - 1) if table.size.height else ZOOM_ROWS
        first = min(round(table.scroll_y), max(0, len(detail.nodes) - rows))
        return span(replace(detail, nodes=detail.nodes[first : first + rows]), now)

    def _rescale(self, *, always: bool = False) -> None:
        """Repaint the bars if their window moved (``always``: open spans grew anyway)."""
        detail = self.detail
        if detail is None:
            return
        now = drawn_now(detail, self._clock())
        window = self._scale(detail, now)
        if window == self._window and not always:
            return
        self._window = window
        table = self.query_one("#nodes-table", DataTable)
        width = self._bar_width()
        for node in detail.nodes:
            table.update_cell(node.node_id, "timeline", timeline_bar(node, *window, width, now))

    def _bar_width(self) -> int:
        return max(8, self.size.width - FIXED_WIDTH)

    def _timeline(self, detail: ProgramDetail) -> None:
        table = self.query_one("#nodes-table", DataTable)
        now = drawn_now(detail, self._clock())
        t0, t1 = self._window = self._scale(detail, now)
        bar_width = self._bar_width()
        path = set(detail.critical_path)
        keep = table.cursor_row
        table.clear()
        for node in detail.nodes:
            name = Text(
                ("◆" if node.node_id in path else " ") + node.node_id,
                style="bold" if node.node_id in path else "",
            )
            table.add_row(
                name,
                fmt.short(node.tool or node.kind, 9),
                fmt.state(node.state),
                fmt.tier(node.kv_tier),
                fmt.secs(node.queue_s),
                fmt.secs(node.service_s),
                fmt.secs(node.tool_s),
                timeline_bar(node, t0, t1, bar_width, now),
                key=node.node_id,
            )
        if detail.nodes:
            table.move_cursor(row=min(max(keep, 0), len(detail.nodes) - 1), animate=False)
