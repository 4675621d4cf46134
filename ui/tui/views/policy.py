"""Switch the policies live (``POST /v1/operator/policy``): a dialog with the scheduling policy
and the tool-wait KV policy in force, each to pick from the server's names.

The names are the server's (``GET /v1/operator/policy``), offered as choices with the ones in
force selected. A server older than that route publishes none: its names are typed, and one it
does not know is refused with a message that lists its names, which the dashboard shows. Only
what was changed is sent: switching the KV policy to the one in force would still start its
tool-wait advisor afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from agentconsole.ui.client.models import PolicyChoices
from agentconsole.ui.tui.literal import literal

#: the longest name the server takes (``PolicyIn``)
NAME_CHARS = 64


@dataclass(frozen=True, slots=True)
class PolicyChoice:
    """The names to switch to (None: leave that policy as it is)."""

    policy: str | None
    kv_policy: str | None


def choice(typed_policy: str, typed_kv_policy: str, policy: str, kv_policy: str) -> PolicyChoice:
    """What to send for the typed names against those in force: a name left blank or as it
    was is not sent."""
    wanted = typed_policy.strip()
    wanted_kv = typed_kv_policy.strip()
    return PolicyChoice(
        policy=wanted if wanted and wanted != policy else None,
        kv_policy=wanted_kv if wanted_kv and wanted_kv != kv_policy else None,
    )


class PolicyScreen(ModalScreen[PolicyChoice | None]):
    """The policies in force, to switch by name; Enter switches, Escape keeps them."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Keep")]
    # its own style, beside the code, as the dialog is opened from the palette only
    DEFAULT_CSS = """
    PolicyScreen { align: center middle; }
    #policy-box {
        width: 70; max-width: 100%; height: auto;
        border: round $warning; background: $surface; padding: 0 1;
    }
    #policy-box Label { margin-top: 1; }
    #policy-now, #policy-hint { color: $text-muted; }
    """

    def __init__(self, policy: str, kv_policy: str, choices: PolicyChoices | None = None) -> None:
        super().__init__()
        #: the names in force when the dialog opened ("" before the first overview)
        self.policy = policy
        self.kv_policy = kv_policy
        #: the server's names to pick from (None: a server that publishes none, names typed)
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical(id="policy-box"):
            now = f"in force: {self.policy or '?'} · kv {self.kv_policy or '?'}"
            yield Static(literal(now), id="policy-now")
            yield Label("Scheduling policy")
            if self.choices is None:
                yield Input(self.policy, id="policy-name", max_length=NAME_CHARS)
            else:
                yield _picker(self.choices.policies, self.policy, "policy-name")
            yield Label("Tool-wait KV policy")
            if self.choices is None:
                yield Input(self.kv_policy, id="kv-policy-name", max_length=NAME_CHARS)
                hint = (
                    "enter switches · escape keeps · a name the server does not know is "
                    "refused with the list of its names"
                )
            else:
                yield _picker(self.choices.kv_policies, self.kv_policy, "kv-policy-name")
                yield Button("Switch", id="policy-switch", variant="warning")
                hint = "pick the server's names · switch sends what changed · escape keeps"
            yield Static(hint, id="policy-hint")

    def on_mount(self) -> None:
        self.query_one("#policy-box").border_title = "Switch policy"
        self.query_one("#policy-name").focus()

    def _picked(self, widget_id: str) -> str:
        widget = self.query_one(f"#{widget_id}")
        if isinstance(widget, Select):
            value = widget.value
            return value if isinstance(value, str) else ""
        assert isinstance(widget, Input)
        return widget.value

    @on(Input.Submitted)
    @on(Button.Pressed, "#policy-switch")
    def _submitted(self) -> None:
        typed = self._picked("policy-name")
        typed_kv = self._picked("kv-policy-name")
        picked = choice(typed, typed_kv, self.policy, self.kv_policy)
        self.dismiss(picked if picked.policy or picked.kv_policy else None)

    def action_close(self) -> None:
        self.dismiss(None)


def _picker(names: tuple[str, ...], in_force: str, widget_id: str) -> Select[str]:
    """The server's ``names`` to pick from, the one ``in_force`` selected (offered even if the
    server left it out of its list, so opening the dialog never changes it)."""
    offered = names if in_force in names or not in_force else (in_force, *names)
    options = [(name, name) for name in offered]
    if not options:
        return Select(options, id=widget_id)
    return Select(options, value=in_force or offered[0], allow_blank=False, id=widget_id)
