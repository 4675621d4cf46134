"""The overview: programs and rates, latency, KV by tier, policy in force, and sparklines."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from agentconsole.ui.client.models import Overview, TierUse
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState

#: the most per-model (per-rank) HBM meters the overview shows; the KV view shows every one
HBM_PARTS = 3


def _grid() -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    return grid


def programs_panel(o: Overview) -> Table:
    """Program counts and the prefix-cache and ghost-token totals."""
    grid = _grid()
    p = o.programs
    grid.add_row("running", str(p.get("running", 0)), "finished", str(p.get("finished", 0)))
    grid.add_row("failed", str(p.get("failed", 0)), "cancelled", str(p.get("cancelled", 0)))
    grid.add_row(
        "prefix hits", fmt.count(o.prefix_hit_tokens), "ghost tok", fmt.count(o.ghost_tokens)
    )
    return grid


def latency_panel(o: Overview) -> Table:
    """E2E percentiles, the two rates, queue depth and running calls."""
    grid = _grid()
    grid.add_row("E2E p50", fmt.secs(o.e2e_p50_s), "throughput", fmt.rate(o.throughput))
    grid.add_row("E2E p95", fmt.secs(o.e2e_p95_s), "goodput", fmt.rate(o.goodput))
    grid.add_row("E2E p99", fmt.secs(o.e2e_p99_s), "queue", str(o.queue_depth))
    grid.add_row("", "", "running", str(o.running_calls))
    return grid


def overview_tiers(kv: Sequence[TierUse]) -> list[TierUse]:
    """The tiers the overview shows: each whole tier, and under HBM its parts (each model's,
    each rank's; the fullest :data:`HBM_PARTS` of them): a sum over several models hides one
    that is full, and device memory is where a model saturates."""
    parts = [t for t in kv if t.tier != "hbm" and fmt.tier_base(t.tier) == "hbm"]
    fullest = {t.tier for t in sorted(parts, key=lambda t: -t.fraction)[:HBM_PARTS]}
    return fmt.ordered_tiers([t for t in kv if "." not in t.tier or t.tier in fullest])


def kv_panel(o: Overview, width: int) -> Text:
    """One meter per KV tier (one line each, :func:`overview_tiers`): used share and
    used/capacity tokens."""
    shown = overview_tiers(o.kv)
    if not shown:
        return Text("no KV tiers reported", style="dim")
    numbers = [f"{fmt.count(t.used_tokens)}/{fmt.count(t.capacity_tokens)}" for t in shown]
    return fmt.tier_meters(shown, width, numbers, number_style="dim")


def policy_panel(o: Overview) -> Text:
    """Scheduling and KV policy, runtime, admission state."""
    text = Text()
    text.append("policy  ", style="dim")
    text.append(o.policy, style="bold")
    text.append("\nkv      ", style="dim")
    text.append(o.kv_policy, style="bold")
    text.append("\nruntime ", style="dim")
    text.append(o.runtime)
    text.append("\nadmit   ", style="dim")
    if o.draining:
        text.append("DRAINING", style="bold red")
    else:
        text.append("open", style="green")
    return text


class OverviewView(Vertical):
    """The first view: is the server healthy and what is it doing."""

    #: what was shown last, shown again when the view is resized
    _state: DashboardState | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(classes="ov-row"):
            yield Static(id="ov-programs", classes="panel")
            yield Static(id="ov-latency", classes="panel")
        with Horizontal(classes="ov-row"):
            yield Static(id="ov-kv", classes="panel")
            yield Static(id="ov-policy", classes="panel")
        with Horizontal(classes="ov-row ov-sparks"):
            with Vertical(id="ov-throughput", classes="panel"):
                yield Sparkline([], id="sp-throughput")
            with Vertical(id="ov-queue", classes="panel"):
                yield Sparkline([], id="sp-queue")

    def on_mount(self) -> None:
        titles = {
            "#ov-programs": "Programs",
            "#ov-latency": "Rates and latency",
            "#ov-kv": "KV by tier",
            "#ov-policy": "Policy",
            "#ov-throughput": "Throughput /s",
            "#ov-queue": "Queue depth",
        }
        for selector, title in titles.items():
            self.query_one(selector).border_title = title

    def on_resize(self) -> None:
        """Lay the meters out again for the new width."""
        if self._state is not None:
            self.show(self._state)

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state`` (a no-op until the first overview arrives)."""
        self._state = state
        o = state.overview
        if o is None:
            return
        self.query_one("#ov-programs", Static).update(programs_panel(o))
        self.query_one("#ov-latency", Static).update(latency_panel(o))
        kv = self.query_one("#ov-kv", Static)
        kv.update(kv_panel(o, kv.content_size.width or 38))
        self.query_one("#ov-policy", Static).update(policy_panel(o))
        self.query_one("#sp-throughput", Sparkline).data = [s.throughput for s in state.history]
        self.query_one("#sp-queue", Sparkline).data = [float(s.queue_depth) for s in state.history]
