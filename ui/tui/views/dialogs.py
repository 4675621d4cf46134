"""Modal dialogs: the cancel confirmation and the key help."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

HELP = """\
[b]Views[/b]      1 overview 2 programs 3 tenants 4 kv 5 audit 6 events 7 tools
[b]Commands[/b]   :  command palette (views, actions, drain, policy, program)
[b]Programs[/b]   enter open  / filter (! inverts)  s/S sort/reverse  a running/all
[b]Actions[/b]    p preempt    c cancel (asks first)  b boost
           w replay this window (trace + bench command)
           m model compatibility (which served models could share KV)
[b]Tools[/b]      enter (or x) reconcile the call in doubt: commit or retry (asks)
[b]Detail[/b]     t DAG/timeline  z (timeline) zoom bars to rows shown  escape back
           n cancel the node under the cursor and its descendants (asks)
[b]Other[/b]      r refresh now    ? this help        q quit

DAG: one line per layer; ◆ marks the critical path; ⇠ names parents
that are not the whole previous layer; ⊖ a node cancelled by n.
Timeline bars: ░ queue ▚ kv reload ▓ prefill █ decode ▒ tool."""


class ConfirmScreen(ModalScreen[bool]):
    """Ask before a destructive action. Focus starts on "No" (k9s: Tab then Enter).

    The question is :class:`Text`, not markup: it names the program, whose id is the server's.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", show=False),
        Binding("n,escape", "answer(False)", "No", show=False),
    ]

    def __init__(self, question: Text, confirm_label: str) -> None:
        super().__init__()
        self.question = question
        self.confirm_label = confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question")
            yield Static("y or Tab+Enter confirms · n or Esc keeps it", id="confirm-hint")
            with Horizontal(id="confirm-buttons"):
                yield Button("Keep (n)", id="no", variant="primary")
                yield Button(f"{self.confirm_label} (y)", id="yes", variant="error")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class HelpScreen(ModalScreen[None]):
    """The key reference."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "close", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(HELP, id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)
