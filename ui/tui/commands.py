"""Command palette entries (opened with ``:``, as in k9s, or Ctrl+P).

System commands cover the views and the actions on the selected program; a provider offers
"open program <id>" for every program the dashboard knows, fuzzy-matched as you type.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Protocol

from textual.app import SystemCommand
from textual.command import DiscoveryHit, Hit, Hits, Matcher, Provider
from textual.content import Content

from agentconsole.ui.tui.literal import literal_content

VIEW_HELP = {
    "overview": "throughput, goodput, latency, queue, KV by tier, policy",
    "programs": "every program with its scheduling state",
    "tenants": "slowdown, starvation and quota use per tenant; the admission door",
    "kv": "tier occupancy, retained prefixes, migrations",
    "audit": "operator actions",
    "events": "live event tail",
    "tools": "tool calls in doubt to reconcile; side effects still running",
}


class DashboardActions(Protocol):
    """The dashboard's actions the palette calls (a protocol, so this module does not import
    the app that imports it)."""

    def action_view(self, name: str) -> None: ...
    def action_act(self, action: str) -> None: ...
    def action_drain(self, enabled: bool) -> None: ...
    def action_policy(self) -> None: ...
    def action_reconcile(self) -> None: ...
    def action_replay_window(self) -> None: ...
    def action_model_compat(self) -> None: ...
    def action_refresh(self) -> None: ...
    def action_help(self) -> None: ...


def system_commands(app: DashboardActions, *, operator: bool = True) -> Iterator[SystemCommand]:
    """The dashboard's own palette entries; without ``operator`` (the key is known to be a
    tenant's) none of those the server keeps for an operator key."""
    for view, text in VIEW_HELP.items():
        if operator or view != "tools":  # the tool calls are the operator's to see
            yield SystemCommand(f"view {view}", text, partial(app.action_view, view))
    for action in ("preempt", "cancel", "boost") if operator else ("cancel",):
        yield SystemCommand(
            f"{action} selected program",
            f"{action} the program under the cursor (or the one open)",
            partial(app.action_act, action),
        )
    if operator:
        yield SystemCommand(
            "reconcile selected tool call",
            "commit (the effect happened) or retry a tool call in doubt; asks first (x)",
            app.action_reconcile,
        )
        yield SystemCommand(
            "replay this window",
            "write the sparklines' window of traffic as a trace; show the bench command (w)",
            app.action_replay_window,
        )
    yield SystemCommand(
        "model compatibility",
        "which served models could share KV (identical leading layers), and why (m)",
        app.action_model_compat,
    )
    if operator:
        yield SystemCommand(
            "switch policy",
            "the scheduling or the tool-wait KV policy, by name, live",
            app.action_policy,
        )
        yield SystemCommand(
            "drain on", "stop admitting new calls (asks first)", partial(app.action_drain, True)
        )
        yield SystemCommand("drain off", "admit new calls again", partial(app.action_drain, False))
    yield SystemCommand("refresh", "reload the visible view now", app.action_refresh)
    yield SystemCommand("help", "keys and glyphs", app.action_help)


def highlighted(matcher: Matcher, candidate: str) -> Content:
    """``candidate`` with the characters ``matcher`` matched in its match style, as
    ``Matcher.highlight`` marks them, but shown verbatim: ``highlight`` reads its candidate
    as markup, and a program id is the server's."""
    content = literal_content(candidate)
    score, offsets = matcher.fuzzy_search.match(matcher.query, candidate)
    if not score:
        return content
    for offset in offsets:
        if not candidate[offset].isspace():
            content = content.stylize(matcher.match_style, offset, offset + 1)
    return content


class ProgramsProvider(Provider):
    """``program <id>``: open any program the dashboard has listed."""

    def _ids(self) -> list[str]:
        state = getattr(self.app, "state", None)
        programs = getattr(state, "programs", {})
        return sorted(programs)

    def _open(self, program_id: str) -> None:
        open_program = getattr(self.app, "open_program", None)
        if callable(open_program):
            open_program(program_id)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for program_id in self._ids():
            command = f"program {program_id}"
            score = matcher.match(command)
            if score > 0:
                yield Hit(
                    score,
                    highlighted(matcher, command),
                    partial(self._open, program_id),
                    text=command,
                    help="open the program detail",
                )

    async def discover(self) -> Hits:
        for program_id in self._ids()[:20]:
            command = f"program {program_id}"
            yield DiscoveryHit(
                literal_content(command),
                partial(self._open, program_id),
                text=command,
                help="open the program detail",
            )
