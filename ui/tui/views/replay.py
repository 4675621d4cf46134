"""The answer of "replay this window": where the trace went and the bench command to run it.

The command sits in a read-only text area, so it can be selected, or copied whole with
``ctrl+c`` (Textual sends it to the terminal's clipboard) and pasted into a shell.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static, TextArea

from agentconsole.ui.client.whatif import WindowReplay
from agentconsole.ui.tui.literal import literal


def summary(replay: WindowReplay, span_s: float) -> str:
    """``12 programs of the last 2 min written to PATH``."""
    minutes = f"{span_s / 60:g} min"
    return f"{replay.programs} programs of the last {minutes} written to\n{replay.path}"


class ReplayScreen(ModalScreen[None]):
    """The written trace and its ``agentconsole bench`` command."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close"),
        Binding("ctrl+c", "copy", "Copy command"),
    ]

    def __init__(self, replay: WindowReplay, span_s: float) -> None:
        super().__init__()
        self.replay = replay
        self.span_s = span_s

    def compose(self) -> ComposeResult:
        with Vertical(id="replay-box"):
            yield Static(literal(summary(self.replay, self.span_s)), id="replay-summary")
            yield Static("Replay it under every policy:", id="replay-hint")
            yield TextArea(
                self.replay.command or "",
                read_only=True,
                soft_wrap=True,
                show_line_numbers=False,
                id="replay-command",
            )
            yield Static("ctrl+c copies the command · escape closes", id="replay-keys")

    def on_mount(self) -> None:
        self.query_one("#replay-box").border_title = "Replay this window"
        self.query_one(TextArea).focus()

    @property
    def command(self) -> str:
        """The command as shown."""
        return self.query_one(TextArea).text

    def action_copy(self) -> None:
        """Put the whole command on the terminal's clipboard."""
        self.app.copy_to_clipboard(self.command)
        self.notify("bench command copied", timeout=3)

    def action_close(self) -> None:
        self.dismiss(None)
