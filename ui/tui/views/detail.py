"""The program detail screen: summary, layered DAG with the critical path, node timelines."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from agentconsole.ui.client.nodecancel import cancellable
from agentconsole.ui.client.programs import Node, ProgramDetail
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.graph import drawn_now, legend, render_dag, span, timeline_bar
from agentconsole.ui.tui.literal import literal
from agentconsole.ui.tui.views.nodecancel import ask_node_cancel
from agentconsole.ui.tui.views.tables import Table, cell_width

NODE_COLUMNS = ("node", "kind", "state", "kv", "queue", "service", "tool", "timeline")
NODE_LABELS = ("Node", "Kind", "State", "KV now", "Queue", "Service", "Tool", "Timeline")
ZOOM_ROWS = 20  # the zoom window before the table has been laid out
#: the longest node id shown whole: agents on plain OpenAI tool calls get inferred ids such as
#: ``tool-c0628c2f3fdb5a8c1a557c0d``, cut in the middle so the distinguishing tail stays
NODE_ID_MAX = 24
#: how far an id gives way on a narrow terminal before the bars do
NODE_ID_MIN = 10
#: the bar width the other columns make room for (by stages, see :data:`STAGES`)
BAR_MIN = 20
#: the narrowest bar drawn at all: as wide as the column's label
BAR_FLOOR = len("Timeline")
#: what gives way, in order, while the bars would be narrower than :data:`BAR_MIN`: first the
#: states shrink to their glyph (the legend names them), then the queue and tool times go (the
#: bars paint them too, ░ and ▒); last the node ids are cut further
STAGES: tuple[tuple[bool, tuple[str, ...]], ...] = (
    (False, NODE_COLUMNS),
    (True, NODE_COLUMNS),
    (True, tuple(c for c in NODE_COLUMNS if c not in ("queue", "tool"))),
)


@dataclass(frozen=True, slots=True)
class TimelineLayout:
    """The node table's shape for a width: which columns, how much of each id, how wide the
    bars. The bars get what the other columns leave, so the table never scrolls sideways (its
    right end is the newest part of the run: the running tool, the last nodes)."""

    columns: tuple[str, ...]
    id_width: int
    glyph_state: bool
    bar_width: int


def node_cells(
    node: Node, on_path: bool, id_width: int, glyph_state: bool
) -> dict[str, Text | str]:
    """The cells of ``node``'s row, the timeline bar aside."""
    name = Text(
        ("◆" if on_path else " ") + fmt.middle(node.node_id, id_width),
        style="bold" if on_path else "",
    )
    state = fmt.node_state(node)
    if glyph_state:
        state = Text(fmt.node_glyph(node), style=state.style)
    return {
        "node": name,
        "kind": fmt.short(node.tool or node.kind, 9),
        "state": state,
        "kv": fmt.tier(node.kv_tier),
        "queue": fmt.secs(node.queue_s),
        "service": fmt.secs(node.service_s),
        "tool": fmt.secs(node.tool_s),
    }


def timeline_layout(nodes: Sequence[Node], room: int, padding: int) -> TimelineLayout:
    """The layout of ``nodes`` in ``room`` cells, each column padded by ``padding`` a side:
    every id whole up to :data:`NODE_ID_MAX`, then the :data:`STAGES` until the bars get
    :data:`BAR_MIN` cells, then shorter ids (down to :data:`NODE_ID_MIN`)."""
    labels = dict(zip(NODE_COLUMNS, NODE_LABELS, strict=True))
    id_width = min(NODE_ID_MAX, max((len(n.node_id) for n in nodes), default=1))
    for glyph_state, columns in STAGES:
        rows = [node_cells(n, False, id_width, glyph_state) for n in nodes]
        others = sum(
            max([len(labels[c]), *(cell_width(row[c]) for row in rows)]) + 2 * padding
            for c in columns
            if c not in ("node", "timeline")
        )
        # the node column (its ◆ included) and the bars' column padding
        fixed = others + 4 * padding + 1
        if room - fixed - max(len("Node") - 1, id_width) >= BAR_MIN:
            break
    id_width = min(id_width, max(NODE_ID_MIN, room - fixed - BAR_MIN))
    bar_width = max(BAR_FLOOR, room - fixed - max(len("Node") - 1, id_width))
    return TimelineLayout(columns, id_width, glyph_state, bar_width)


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
    """One program; ``p``/``c``/``b`` act on it (bound by the app), ``n`` cancels the node
    under the timeline's cursor (asks first), Escape goes back."""

    #: the footer must show every key but the palette's at 80 columns (``?`` Help above all),
    #: with the app's ``p c b ? q`` after these: so ``t`` names the tab it opens, not both,
    #: ``z`` shows only where the bars are, and ``:`` (in the help) leaves the footer here
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("t", "show_tab('tab-timeline')", "Timeline"),
        Binding("t", "show_tab('tab-dag')", "DAG"),
        Binding("z", "zoom", "Zoom"),
        Binding("n", "cancel_node", "Cancel node"),
        Binding("colon", "app.command_palette", "Cmd", show=False),
    ]

    def __init__(
        self,
        program_id: str,
        clock: Callable[[], float] = time.time,
        cancel_node: Callable[[str, str], None] | None = None,
    ) -> None:
        super().__init__()
        self.program_id = program_id
        #: sends a node cancel (program id, node id); None: no node cancel offered
        self._cancel_node = cancel_node
        self.detail: ProgramDetail | None = None
        self.zoom = False
        self._window: tuple[float, float] = (0.0, 1.0)
        self._layout = TimelineLayout(NODE_COLUMNS, NODE_ID_MAX, False, BAR_FLOOR)
        #: the screen width the DAG and the timeline were last laid out for
        self._drawn_width = 0
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
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self._columns(self._layout)

    def on_resize(self) -> None:
        """Lay the DAG and the timeline out again for a new width (only then: a redraw puts
        the table back at its top, and a screen shown again is resized to the same size)."""
        if self.detail is not None and self.size.width != self._drawn_width:
            self._draw(self.detail)

    def _columns(self, layout: TimelineLayout) -> None:
        """Empty the node table and give it ``layout``'s columns. Columns are made anew each
        time: a DataTable's column only ever widens to its cells, so one kept from a wider
        layout (longer ids, whole states, a wider terminal) would push the bars off screen."""
        table = self.query_one("#nodes-table", DataTable)
        table.clear(columns=True)
        for column, label in zip(NODE_COLUMNS, NODE_LABELS, strict=True):
            if column in layout.columns:
                table.add_column(label, key=column)

    def action_toggle_tab(self) -> None:
        tabs = self.query_one(TabbedContent)
        self.action_show_tab("tab-timeline" if tabs.active == "tab-dag" else "tab-dag")

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self.refresh_bindings()

    @on(TabbedContent.TabActivated, "#detail-tabs")
    def _tab_shown(self) -> None:
        """A tab opened by a click too: the footer's keys follow the tab shown."""
        self.refresh_bindings()

    def cursor_node(self) -> Node | None:
        """The node under the timeline's cursor (its rows are the detail's nodes, in order)."""
        detail = self.detail
        row = self.query_one("#nodes-table", DataTable).cursor_row
        return detail.nodes[row] if detail is not None and 0 <= row < len(detail.nodes) else None

    def _on_timeline(self) -> bool:
        return self.query_one(TabbedContent).active == "tab-timeline"

    def _tab(self) -> str:
        """The tab shown; the DAG (the first) while the tabs are not mounted yet, when the
        footer may already ask which keys to show."""
        tabs = next(iter(self.query(TabbedContent)), None)
        return (tabs.active if tabs is not None else "") or "tab-dag"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Offer the node cancel only for a node that has not ended (dimmed otherwise, its
        key does nothing); on the DAG tab, where no node is under a cursor, it opens the
        timeline to pick one. ``t`` offers the other tab; ``z`` only where the bars are."""
        if action == "show_tab":
            return parameters != (self._tab(),)
        if action == "zoom":
            return self._tab() == "tab-timeline"
        if action != "cancel_node":
            return True
        if self._cancel_node is None or self.detail is None:
            return None
        if not self._on_timeline():
            return True
        node = self.cursor_node()
        return True if node is not None and cancellable(node, self.detail.summary.state) else None

    def action_cancel_node(self) -> None:
        """Ask before cancelling the node under the cursor and its descendants not yet ended."""
        detail, node = self.detail, self.cursor_node()
        if not self._on_timeline():
            self.action_toggle_tab()
            self.notify("pick the node to cancel (up/down), then n", severity="warning")
            return
        if self._cancel_node is None or detail is None or node is None:
            return
        if not cancellable(node, detail.summary.state):  # the footer dims it: a key raced it
            return
        ask_node_cancel(self.app, detail, node, self._cancel_node)

    def show(self, detail: ProgramDetail) -> None:
        """Redraw everything from ``detail``; an unchanged one with spans still open redraws
        only the bars, which grow with time although the server's answer did not change."""
        if detail == self.detail:
            if detail.running_spans:
                self._rescale(always=True)
            return
        self.detail = detail
        self.query_one("#detail-summary", Static).update(summary(detail))
        self._draw(detail)

    def _draw(self, detail: ProgramDetail) -> None:
        """The DAG and the timeline of ``detail``, laid out for the screen's width now."""
        self._drawn_width = self.size.width
        width = max(30, self.size.width - 4)
        self.query_one("#dag", Static).update(render_dag(detail, width))
        self._timeline(detail)
        self._node_model()
        self.query_one("#detail-legend", Static).update(
            legend(withdrawn=any(n.withdrawn for n in detail.nodes))
        )
        self.refresh_bindings()
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
        self.refresh_bindings()  # the node cancel is offered for the node under the cursor
        if self.zoom:
            self._rescale()

    def _node_model(self) -> None:
        """Which model ran the node under the cursor and why (several models served)."""
        node = self.cursor_node()
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
        width = self._layout.bar_width
        for node in detail.nodes:
            table.update_cell(node.node_id, "timeline", timeline_bar(node, *window, width, now))

    def _room(self) -> int:
        """The cells the node table can show: the screen's width (the table spans it, and it
        may be hidden behind the DAG tab, unsized) less a vertical scrollbar, kept free even
        while the rows fit, so that one appearing never covers the bars' newest end."""
        table = self.query_one("#nodes-table", DataTable)
        return self.size.width - table.styles.scrollbar_size_vertical

    def _timeline(self, detail: ProgramDetail) -> None:
        table = self.query_one("#nodes-table", DataTable)
        now = drawn_now(detail, self._clock())
        t0, t1 = self._window = self._scale(detail, now)
        layout = self._layout = timeline_layout(detail.nodes, self._room(), table.cell_padding)
        path = set(detail.critical_path)
        keep = table.cursor_row
        self._columns(layout)
        for node in detail.nodes:
            cells = node_cells(node, node.node_id in path, layout.id_width, layout.glyph_state)
            cells["timeline"] = timeline_bar(node, t0, t1, layout.bar_width, now)
            table.add_row(*(cells[c] for c in layout.columns), key=node.node_id)
        if detail.nodes:
            table.move_cursor(row=min(max(keep, 0), len(detail.nodes) - 1), animate=False)
