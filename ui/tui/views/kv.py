"""The KV tiers view: occupancy per tier, prefixes retained for tool waits, placement."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Static

from agentconsole.ui.client.models import KVState
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.views.tables import Column, Table, show_fitted

PLACEMENT_ROWS = 200
#: the retained prefixes; on a narrow terminal the expiry goes first, then the tenant (the
#: program id, its tokens and tier are what the table is for)
RETAINED_COLUMNS = (
    Column("program", "Program"),
    Column("tenant", "Tenant", drop=2),
    Column("tokens", "Tokens", numeric=True),
    Column("tier", "Tier"),
    Column("until", "Until", numeric=True, drop=1),
)
PLACEMENT_TIERS = ("hbm", "dram", "disk")


def placement_tiers(kv: KVState) -> tuple[str, ...]:
    """The tiers the placement table has a column for: those holding some program's KV (a
    runtime without a host tier places in HBM only; empty columns would take the ids' room),
    every one while no program is placed."""
    held = {tier for tiers in kv.placement.values() for tier, tokens in tiers.items() if tokens}
    return tuple(t for t in PLACEMENT_TIERS if t in held) or PLACEMENT_TIERS


def tiers_text(kv: KVState, width: int) -> Text:
    """A meter per tier (each whole tier, then its per-model or per-rank parts), one line each,
    plus the migration and recompute counters."""
    shown = fmt.ordered_tiers(kv.tiers)
    tokens = [f"{fmt.count(t.used_tokens)}/{fmt.count(t.capacity_tokens)} tok" for t in shown]
    sizes = [fmt.nbytes(t.used_bytes) for t in shown]
    tokens_width = max((len(t) for t in tokens), default=0)
    sizes_width = max((len(s) for s in sizes), default=0)
    numbers = [
        f"{t:<{tokens_width}} {s:>{sizes_width}}" for t, s in zip(tokens, sizes, strict=True)
    ]
    text = fmt.tier_meters(shown, width, numbers)
    if shown:
        text.append("\n")
    text.append("migrations ", style="dim")
    text.append(str(kv.migrations), style="bold")
    text.append("  recomputes ", style="dim")
    text.append(str(kv.recomputes), style="bold")
    text.append("  retained for tool waits ", style="dim")
    text.append(str(len(kv.retained)), style="bold")
    return text


class KVView(Vertical):
    """Where KV lives, and which programs keep KV while they wait on a tool."""

    #: what was shown last, shown again when the view is resized
    _state: DashboardState | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="kv-tiers", classes="panel")
        with Horizontal(id="kv-tables"):
            retained = Table(id="kv-retained", cursor_type="row")
            yield retained
            placement = Table(id="kv-placement", cursor_type="row")
            yield placement

    def on_mount(self) -> None:
        self.query_one("#kv-tiers").border_title = "Tiers"
        self.query_one("#kv-retained", DataTable).border_title = "Retained in tool wait"
        self.query_one("#kv-placement", DataTable).border_title = "Placement (tokens)"

    def on_resize(self) -> None:
        """Lay the meters and tables out again for the new size."""
        if self._state is not None:
            self.show(self._state)

    def _room(self, table: DataTable[Text | str]) -> int:
        """The cells ``table`` can show, a vertical scrollbar kept free (one appearing must not
        cover the numbers); before the first layout, half the view's (or the app's) width."""
        if table.content_region.width:
            return table.content_region.width - table.styles.scrollbar_size_vertical
        width = self.size.width or self.app.size.width
        return width // 2 - table.styles.gutter.width - table.styles.scrollbar_size_vertical

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state``."""
        self._state = state
        kv = state.kv
        if kv is None:
            return
        panel = self.query_one("#kv-tiers", Static)
        panel.update(tiers_text(kv, panel.content_size.width or max(40, self.app.size.width - 4)))
        retained = self.query_one("#kv-retained", DataTable)
        show_fitted(
            retained,
            RETAINED_COLUMNS,
            [
                (
                    r.program_id,
                    [
                        r.program_id,
                        r.tenant,
                        fmt.count(r.tokens),
                        fmt.tier(r.tier),
                        fmt.clock(r.until) if r.until else "-",
                    ],
                )
                for r in kv.retained
            ],
            self._room(retained),
        )
        ranked = sorted(kv.placement.items(), key=lambda item: -sum(item[1].values()))
        placement = self.query_one("#kv-placement", DataTable)
        shown = placement_tiers(kv)
        show_fitted(
            placement,
            (Column("program", "Program"), *(Column(t, t.upper(), numeric=True) for t in shown)),
            [
                (pid, [pid, *(fmt.count(tiers.get(t, 0)) for t in shown)])
                for pid, tiers in ranked[:PLACEMENT_ROWS]
            ],
            self._room(placement),
        )
