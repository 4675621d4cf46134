"""The node cancel of the program screen: what it will stop, asked first, then sent.

The question names the node, how many of its descendants go with it (those not yet ended: the
server's rule, :func:`descendants_to_cancel`) and what happens to their work, as the program
cancel's question does; the answer comes back as a toast (``DataSync.cancel_node``).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import App

from agentconsole.ui.client.nodecancel import descendants_to_cancel
from agentconsole.ui.client.programs import Node, ProgramDetail
from agentconsole.ui.tui.views.dialogs import ConfirmScreen

#: how many of the descendants the question names (the count is always whole)
NAMED_DESCENDANTS = 3


def question(detail: ProgramDetail, node: Node) -> Text:
    """What cancelling ``node`` stops, for the confirmation."""
    below = descendants_to_cancel(detail, node.node_id)
    text = Text.assemble(
        "Cancel node ", (node.node_id, "bold"), f" ({node.tool or node.kind}, {node.state})"
    )
    text.append(" of program ")
    text.append(detail.summary.program_id, style="bold")
    if below:
        named = ", ".join(below[:NAMED_DESCENDANTS])
        more = (
            f" and {len(below) - NAMED_DESCENDANTS} more" if len(below) > NAMED_DESCENDANTS else ""
        )
        text.append(f" and its {len(below)} descendants not yet ended ({named}{more})")
    else:
        text.append(" (no descendant not yet ended)")
    text.append(
        "?\n\nTheir queued and running calls are aborted and read-only tools interrupted; "
        "side-effecting tools run on to their commit. The program keeps running, with "
        "nothing new under these nodes. This cannot be undone."
    )
    return text


def ask_node_cancel(
    app: App[object], detail: ProgramDetail, node: Node, send: Callable[[str, str], None]
) -> None:
    """Ask before cancelling ``node`` of ``detail``; ``send(program_id, node_id)`` on yes."""
    program_id, node_id = detail.summary.program_id, node.node_id

    def answered(yes: bool | None) -> None:
        if yes:
            send(program_id, node_id)

    app.push_screen(ConfirmScreen(question(detail, node), "Cancel node"), answered)
