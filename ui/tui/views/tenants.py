"""The tenants view: per-tenant slowdown, starvation and quota use, and under them the
admission door that holds programs back (``views.door``)."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from agentconsole.ui.client.models import TenantRow
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.views.door import DoorPanel
from agentconsole.ui.tui.views.tables import Cell, Table, refill

#: (key, header): starvation is a ratio, the largest queue wait over the service received
COLUMNS = (
    ("tenant", "Tenant"),
    ("programs", "Programs"),
    ("running", "Running"),
    ("slowdown", "Slowdown"),
    ("starve", "Starve (wait/service)"),
    ("max wait", "Max Wait"),
    ("tokens", "Tokens"),
    ("quota", "Quota"),
    ("tok/min", "Tok/Min"),
    ("stored", "Stored"),
    ("lost reuse", "Lost Reuse"),
)


def _against(used: float, limit: float | None, shown: Callable[[float], str]) -> Text:
    """``used`` against its tenant-level limit, both written by ``shown``; red once it is
    reached."""
    if limit is None:
        return Text(shown(used))
    return Text(f"{shown(used)} / {shown(limit)}", style="bold red" if used >= limit else "")


def _starvation(value: float | None) -> Text:
    """The wait/service ratio; ``-`` while unknown (no service yet: no ratio, not 0)."""
    if value is None:
        return Text("-", style="dim")
    return Text(f"{value:.2f}", style="bold yellow" if value > 0.2 else "")


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
        _starvation(t.starvation),
        fmt.secs(t.max_queue_wait_s),
        fmt.count(t.tokens_used),
        quota or "-",
        _against(t.tokens_last_minute, t.limits.get("tokens_per_minute"), fmt.count),
        _against(t.stored_bytes, t.limits.get("stored_bytes"), fmt.nbytes),
        fmt.count(t.lost_reuse_tokens),
    ]


class TenantsView(Vertical):
    """Is any tenant starved or over quota, and is the door what holds programs back?"""

    def compose(self) -> ComposeResult:
        yield Table(id="tenants-table", cursor_type="row")
        yield DoorPanel(id="door-section")

    def on_mount(self) -> None:
        table = self.query_one("#tenants-table", DataTable)
        for key, header in COLUMNS:
            table.add_column(header, key=key)

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state``."""
        rows = [(t.tenant, cells(t)) for t in state.tenants]
        refill(self.query_one("#tenants-table", DataTable), rows)
        self.query_one(DoorPanel).show(state.door)
