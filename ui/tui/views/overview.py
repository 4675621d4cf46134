"""The overview: programs and rates, latency, KV by tier, policy in force, and sparklines."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from agentconsole.ui.client.models import Overview
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.state import DashboardState


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


def kv_panel(o: Overview, width: int) -> Text:
    """One meter per KV tier: used share, used/capacity tokens and bytes."""
    text = Text()
    meter = max(4, width - 21)
    for i, tier in enumerate(o.kv):
        if i:
            text.append("\n")
        text.append(f"{tier.tier:<5}", style=fmt.TIER_STYLES.get(tier.tier, ""))
        text.append_text(fmt.bar(tier.fraction, meter, fmt.TIER_STYLES.get(tier.tier, "green")))
        text.append(" ")
        text.append_text(fmt.fill(tier.fraction))
        text.append(" ")
        text.append(f"{fmt.count(tier.used_tokens)}/{fmt.count(tier.capacity_tokens)}", style="dim")
    if not o.kv:
        text.append("no KV tiers reported", style="dim")
    return text


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

    def show(self, state: DashboardState) -> None:
        """Redraw from ``state`` (a no-op until the first overview arrives)."""
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
