"""Reconcile a tool call in doubt: a dialog to choose ``commit`` (the effect happened, with its
result as JSON, optional) or ``retry`` (allow one new execution), then the confirmation every
destructive action asks (:class:`ConfirmScreen`), then the server's answer as a notice.

Everything shown of the call is the server's (ids, tool names, reasons): as :class:`Text`,
never markup.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from agentconsole.ui.client.toolcalls import ToolCall, parse_result
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.views.dialogs import ConfirmScreen
from agentconsole.ui.tui.views.toolcalls import time_of_day

#: how much of the result a confirmation quotes
RESULT_SHOWN = 120


@dataclass(frozen=True, slots=True)
class ReconcileChoice:
    """What the operator chose: ``commit`` with ``result`` (null when none was given), or
    ``retry``."""

    action: str
    result: Any = None


def facts(call: ToolCall) -> Text:
    """Which call, whose, since when and why it is in doubt."""
    text = Text()
    for label, value in (
        ("tool", call.tool),
        ("program", f"{call.program_id} / node {call.node_id}"),
        ("tenant", call.tenant or "?"),
        ("since", f"{time_of_day(call.updated_at)} UTC (began {time_of_day(call.created_at)})"),
        ("why", call.why),
        ("id", call.tool_call_id),
    ):
        text.append(f"{label:>8} ", style="dim")
        text.append(value + "\n")
    text.rstrip()
    return text


def question(call: ToolCall, choice: ReconcileChoice) -> Text:
    """The confirmation of ``choice``: what the server will record, and what follows."""
    where = (call.tool, "bold")
    place = f" of {call.program_id}/{call.node_id}"
    if choice.action == "commit":
        result = fmt.short(json.dumps(choice.result), RESULT_SHOWN)
        return Text.assemble(
            "Commit ",
            where,
            place,
            f"?\n\nThe server records that its effect happened, with result {result}: the "
            "agent's retry gets that result and the tool does not run again. This cannot be "
            "undone.",
        )
    return Text.assemble(
        "Allow one new execution of ",
        where,
        place,
        "?\n\nThe agent's next call with the same key runs the tool once more: if the first "
        "execution did take effect, it happens twice. This cannot be undone.",
    )


class ReconcileScreen(ModalScreen[ReconcileChoice | None]):
    """The call in doubt and the two decisions; focus starts on "Keep" (Escape too)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "keep", "Keep", show=False)]
    DEFAULT_CSS = """
    ReconcileScreen { align: center middle; }
    #reconcile-box {
        width: 76; max-width: 100%; height: auto;
        border: thick $warning; background: $surface; padding: 0 1;
    }
    #reconcile-result { margin-top: 1; }
    #reconcile-error { color: $text-error; display: none; }
    #reconcile-hint { color: $text-muted; }
    #reconcile-buttons { height: auto; margin-top: 1; align-horizontal: right; }
    #reconcile-buttons Button { margin-left: 1; }
    """

    def __init__(self, call: ToolCall) -> None:
        super().__init__()
        self.call = call

    def compose(self) -> ComposeResult:
        with Vertical(id="reconcile-box"):
            yield Static(facts(self.call), id="reconcile-facts")
            yield Input(
                placeholder="the result, as JSON (for a commit; empty: null)", id="reconcile-result"
            )
            yield Static(id="reconcile-error")
            yield Static(
                "commit: the effect happened (its result is replayed to the agent) · "
                "retry: allow one new execution · both ask first",
                id="reconcile-hint",
            )
            with Horizontal(id="reconcile-buttons"):
                yield Button("Keep (esc)", id="keep", variant="primary")
                yield Button("Commit…", id="commit", variant="error")
                yield Button("Retry…", id="retry", variant="warning")

    def on_mount(self) -> None:
        self.query_one("#reconcile-box").border_title = "Reconcile a tool call in doubt"
        self.query_one("#keep", Button).focus()

    def action_keep(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#keep")
    def _keep(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#retry")
    def _retry(self) -> None:
        self.dismiss(ReconcileChoice("retry"))

    @on(Button.Pressed, "#commit")
    def _commit(self) -> None:
        try:
            result = parse_result(self.query_one("#reconcile-result", Input).value)
        except ValueError as error:
            shown = self.query_one("#reconcile-error", Static)
            shown.update(Text(str(error)))
            shown.display = True
            return
        self.dismiss(ReconcileChoice("commit", result))


def ask_reconcile(
    app: App[None], call: ToolCall, send: Callable[[ToolCall, str, Any], None]
) -> None:
    """Open the dialog for ``call``; once a choice is confirmed, ``send(call, action, result)``."""

    def chosen(choice: ReconcileChoice | None) -> None:
        if choice is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                send(call, choice.action, choice.result)

        label = "Commit" if choice.action == "commit" else "Retry"
        app.push_screen(ConfirmScreen(question(call, choice), label), answered)

    app.push_screen(ReconcileScreen(call), chosen)
