"""The actions on the server: preempt, boost and cancel a program, drain, switch the policy,
reconcile a tool call in doubt, replay the window; what each asks first, and its answer.

A destructive action asks first (:class:`ConfirmScreen`, focus on "No"); each is sent on a
:class:`~agentconsole.ui.tui.sync.DataSync` worker, and its answer comes back as a message
(:class:`~m.ActionDone`, :class:`~m.ReplayWritten`, :class:`~m.PolicyChoicesLoaded`) that
the handlers here show as a notice or a dialog. The node cancel of the program screen is the
screen's own (``views/nodecancel.py``); its answer comes as an ``ActionDone`` too.
"""

from __future__ import annotations

from rich.text import Text
from textual import on

from agentconsole.ui.tui import messages as m
from agentconsole.ui.tui.frame import DashboardFrame, while_running
from agentconsole.ui.tui.loader import TOOLS
from agentconsole.ui.tui.state import HISTORY
from agentconsole.ui.tui.views.dialogs import ConfirmScreen
from agentconsole.ui.tui.views.policy import PolicyChoice, PolicyScreen
from agentconsole.ui.tui.views.reconcile import ask_reconcile
from agentconsole.ui.tui.views.replay import ReplayScreen
from agentconsole.ui.tui.views.toolcalls import ToolCallsView

#: the actions only an operator key may take (the server refuses them to a tenant's, 403): with
#: a key known to be a tenant's they leave the footer, the keys and the palette; its cancel
#: of its own program is allowed (the program's own route)
OPERATOR_ACTIONS = frozenset({"drain", "replay_window", "policy", "reconcile"})
OPERATOR_PROGRAM_ACTIONS = frozenset({"preempt", "boost"})


class OperatorActions(DashboardFrame):
    """The keys' and the palette's actions on the server, and the handlers of their answers."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Leave out the operator's actions once the key is known to be a tenant's (hidden
        from the footer, their keys do nothing): each would be refused and audited."""
        if not self.sync.tenant_key:
            return True
        if action in OPERATOR_ACTIONS or (action == "view" and parameters == (TOOLS,)):
            return False
        return not (action == "act" and set(parameters) & OPERATOR_PROGRAM_ACTIONS)

    def action_act(self, action: str) -> None:
        """Preempt, boost or (after confirmation) cancel the selected program."""
        program_id = self.selected_program()
        if program_id is None:
            self.notify("select a program first (2: programs)", severity="warning")
            return
        if action != "cancel":
            self.sync.act(action, program_id)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.sync.act("cancel", program_id)

        question = Text.assemble(
            "Cancel program ",
            (program_id, "bold"),
            "?\n\nIts running calls are aborted, pending nodes dropped and KV reclaimed. "
            "This cannot be undone.",
        )
        self.push_screen(ConfirmScreen(question, "Cancel program"), answered)

    def action_drain(self, enabled: bool) -> None:
        """Stop (after confirmation, as a cancel) or resume admitting new calls."""
        if not enabled:
            self.sync.drain(False)  # resuming admits calls again: nothing to undo
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.sync.drain(True)

        # the server refuses at once (503 ``draining``, Retry-After), it does not hold calls:
        # running agents see errors on their next call, which the operator must know first
        question = Text(
            "Drain: stop admitting new calls?\n\nNew calls from every tenant are refused (503, "
            "retry later) until the drain ends, the next call of running programs included; "
            "calls already admitted continue. Remembered across a server restart."
        )
        self.push_screen(ConfirmScreen(question, "Drain"), answered)

    def action_policy(self) -> None:
        """Switch the scheduling and/or the tool-wait KV policy: the server's names are read
        first, and the dialog opens once they come (:meth:`_policy_choices_loaded`)."""
        self.sync.load_policy_choices()

    @on(m.PolicyChoicesLoaded)
    @while_running
    def _policy_choices_loaded(self, message: m.PolicyChoicesLoaded) -> None:
        choices = message.choices
        overview = self.state.overview
        if choices is not None:  # the server's answer is newer than the last overview
            policy, kv_policy = choices.policy, choices.kv_policy
        else:
            policy, kv_policy = (overview.policy, overview.kv_policy) if overview else ("", "")

        def answered(picked: PolicyChoice | None) -> None:
            if picked is not None:
                self.sync.set_policy(picked.policy, picked.kv_policy)

        self.push_screen(PolicyScreen(policy, kv_policy, choices), answered)

    def action_reconcile(self) -> None:
        """Reconcile the tool call in doubt under the tools view's cursor."""
        view = self.view(TOOLS)
        assert isinstance(view, ToolCallsView)
        selected = view.selected() if self.active_view == TOOLS else None
        self.reconcile_tool_call(selected or "")

    def reconcile_tool_call(self, tool_call_id: str) -> None:
        """Ask what to record for a call in doubt (commit with its result, or retry), confirm
        it, and send it; the notice says what the server did, or why it refused."""
        board = self.state.tool_calls
        call = board.find(tool_call_id) if board is not None else None
        if call is None or self.sync.tenant_key:
            self.notify("select a tool call in doubt first (7: tools)", severity="warning")
            return
        ask_reconcile(self, call, self.sync.reconcile)

    def action_replay_window(self) -> None:
        """Write the traffic of the sparklines' window (their ``HISTORY`` one-second samples,
        until now) as a trace on the server, and show its path and bench command."""
        self.sync.replay(HISTORY)

    @on(m.ReplayWritten)
    @while_running
    def _replay_written(self, message: m.ReplayWritten) -> None:
        replay = message.replay
        if replay.empty:
            self.notify(replay.message, title="replay this window", severity="warning")
            return
        self.notify(f"{replay.programs} programs -> {replay.path}", title="replay this window")
        self.push_screen(ReplayScreen(replay, message.span_s))

    @on(m.ActionDone)
    @while_running
    def _action_done(self, message: m.ActionDone) -> None:
        self.notify(
            message.text, title=message.action, severity="information" if message.ok else "error"
        )
        self.refresh_data()
        if message.action == "reconcile":  # the top bar's count, whatever the view
            self.sync.read_tool_calls()
