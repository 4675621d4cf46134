"""The tenants view: per-tenant slowdown, starvation and quota use, and under them the
admission door that holds programs back (``views.door``)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from agentconsole.ui.client.models import TenantRow
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.views.door import DoorPanel
from agentconsole.ui.tui.views.tables import Cell, Table, refill

COLUMNS = (
    "tenant",
    "programs",
    "running",
    "slowdown",
    "starve",
    "max wait",
    "tokens",
    "quota",
    "tok/min",
    "stored",
    "lost reuse",
)


def _against(used: float, limit: float | None, shown: str) -> Text:
    """``used`` (as ``shown``) against its tenant-level limit; red once it is reached."""
    if limit is None:
        return Text(shown)
    return Text(f"{shown} / {fmt.count(limit)}", style="bold red" if used >= limit else "")


def cells(t: TenantRow) -> list[Cell]:
    """One tenant's cells; slowdown above 2x and starvation above 0.2 are flagged."""
    quota = " ".join(f"{name[:4]} {share:.0%}" for name, share in sorted(t.quota_use.items()))
    return [
        t.tenant,
        str(t.programs),
        str(t.running),
        Text("-", style="dim")
        if t.slowdown is None
        else Text(f"{t.slowdown:.2f}x", style="bold red" if t.slowdown > 2 else ""),
        Text(f"{t.starvation:.2f}", style="bold yellow" if t.starvation > 0.2 else ""),
        fmt.secs(t.max_queue_wait_s),
        fmt.count(t.tokens_used),
        quota or "-",
        _against(
            t.tokens_last_minute,
            t.limits.get("tokens_per_minute"),
            fmt.count(t.tokens_last_minute),
        ),
        _against(t.stored_bytes, t.limits.get("stored_bytes"), fmt.count(t.stored_bytes)),
        fmt.count(t.lost_reuse_tokens),
    ]


class TenantsView(Vertical):
    """Is any tenant starved or over quota, and is the door what holds programs back?"""

    def compose(self) -> ComposeResult:
        yield Table(id="tenants-table", cursor_type="row")
        yield DoorPanel(id="door-section")

    def on_mount(self) -> None:
        table = self.query_one("#tenants-table", DataTable)
        for column in COLUMNS:
            table.add_column(column.title(), key=column)

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state``."""
        rows = [(t.tenant, cells(t)) for t in state.tenants]
        refill(self.query_one("#tenants-table", DataTable), rows)
        self.query_one(DoorPanel).show(state.door)
