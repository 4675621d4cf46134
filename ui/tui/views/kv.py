"""The KV tiers view: occupancy per tier, prefixes retained for tool waits, placement."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Static

from agentconsole.ui.client.models import KVState
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.views.tables import Table, refill

PLACEMENT_ROWS = 200


def tiers_text(kv: KVState, width: int) -> Text:
    """A meter per tier plus the migration and recompute counters."""
    text = Text()
    meter = max(4, width - 42)
    for tier in kv.tiers:
        style = fmt.TIER_STYLES.get(tier.tier, "green")
        text.append(f"{tier.tier:<5}", style=style)
        text.append_text(fmt.bar(tier.fraction, meter, style))
        tokens = f"{fmt.count(tier.used_tokens)}/{fmt.count(tier.capacity_tokens)} tok"
        text.append(" ")
        text.append_text(fmt.fill(tier.fraction))
        text.append(f" {tokens:<18}{fmt.nbytes(tier.used_bytes):>9}\n")
    text.append("migrations ", style="dim")
    text.append(str(kv.migrations), style="bold")
    text.append("  recomputes ", style="dim")
    text.append(str(kv.recomputes), style="bold")
    text.append("  retained for tool waits ", style="dim")
    text.append(str(len(kv.retained)), style="bold")
    return text


class KVView(Vertical):
    """Where KV lives, and which programs keep KV while they wait on a tool."""

    def compose(self) -> ComposeResult:
        yield Static(id="kv-tiers", classes="panel")
        with Horizontal(id="kv-tables"):
            retained = Table(id="kv-retained", cursor_type="row")
            yield retained
            placement = Table(id="kv-placement", cursor_type="row")
            yield placement

    def on_mount(self) -> None:
        self.query_one("#kv-tiers").border_title = "Tiers"
        retained = self.query_one("#kv-retained", DataTable)
        retained.border_title = "Retained in tool wait"
        for column in ("program", "tenant", "tokens", "tier", "until"):
            retained.add_column(column.title(), key=column)
        placement = self.query_one("#kv-placement", DataTable)
        placement.border_title = "Placement (tokens)"
        for column in ("program", "hbm", "dram", "disk"):
            placement.add_column(column.upper() if column != "program" else "Program", key=column)

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state``."""
        kv = state.kv
        if kv is None:
            return
        panel = self.query_one("#kv-tiers", Static)
        panel.update(tiers_text(kv, panel.content_size.width or 76))
        refill(
            self.query_one("#kv-retained", DataTable),
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
        )
        ranked = sorted(kv.placement.items(), key=lambda item: -sum(item[1].values()))
        refill(
            self.query_one("#kv-placement", DataTable),
            [
                (pid, [pid, *(fmt.count(tiers.get(t, 0)) for t in ("hbm", "dram", "disk"))])
                for pid, tiers in ranked[:PLACEMENT_ROWS]
            ],
        )
