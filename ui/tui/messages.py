"""Typed messages from the dashboard's workers to its UI thread.

Loads and ticks that can be superseded say so in ``can_replace``: when a burst of them waits in
the queue, Textual drops all but the newest (the toolong pattern), so the screen never falls
behind the server. Feed events themselves travel through a buffer (see ``feedbuffer``); only
the wake-up :class:`FeedPending` goes through the queue, and coalesces.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from agentconsole.ui.client.door import Door
from agentconsole.ui.client.models import AuditEntry, KVState, Overview, PolicyChoices, TenantRow
from agentconsole.ui.client.programs import ProgramDetail, ProgramPage
from agentconsole.ui.client.toolcalls import ToolCallBoard
from agentconsole.ui.client.whatif import WindowReplay


@dataclass
class FeedPending(Message):
    """Events are waiting in the feed buffer."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FeedPending)


@dataclass
class FeedChanged(Message):
    """The feed connected or lost its connection."""

    live: bool
    detail: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FeedChanged)


@dataclass
class OverviewLoaded(Message):
    """A new overview: a once-a-second ``tick`` of the feed, or a poll's answer."""

    overview: Overview
    tick: bool = False

    def can_replace(self, message: Message) -> bool:
        # a tick is a history sample: only a newer tick may stand in for it
        return isinstance(message, OverviewLoaded) and (message.tick or not self.tick)


@dataclass
class ProgramsLoaded(Message):
    """A fresh program list."""

    page: ProgramPage

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ProgramsLoaded)


@dataclass
class ProgramLoaded(Message):
    """A fresh program detail."""

    detail: ProgramDetail

    def can_replace(self, message: Message) -> bool:
        return (
            isinstance(message, ProgramLoaded)
            and message.detail.summary.program_id == self.detail.summary.program_id
        )


@dataclass
class TenantsLoaded(Message):
    """Fresh tenant rows."""

    tenants: list[TenantRow]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TenantsLoaded)


@dataclass
class DoorLoaded(Message):
    """A fresh read of the admission door."""

    door: Door

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DoorLoaded)


@dataclass
class ToolCallsLoaded(Message):
    """A fresh read of the tool calls that need an operator and the side effects running."""

    board: ToolCallBoard

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ToolCallsLoaded)


@dataclass
class ReadRefused(Message):
    """The server refused an operator read (``what``: the door, the audit log, the tool calls)
    to this key
    (``status`` 403: it shows every tenant's figures and actions, so it is the operator's;
    401: the server knows no such key) or has none (404: an older server); the dashboard
    hides it and does not ask again."""

    what: str
    reason: str
    status: int = 403

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ReadRefused) and message.what == self.what


@dataclass
class KVLoaded(Message):
    """A fresh KV state."""

    kv: KVState

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, KVLoaded)


@dataclass
class AuditLoaded(Message):
    """Fresh audit rows."""

    actions: list[AuditEntry]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AuditLoaded)


@dataclass
class LoadFailed(Message):
    """A read failed; ``what`` names it so repeats of one failure coalesce."""

    what: str
    error: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadFailed) and message.what == self.what


@dataclass
class ReplayWritten(Message):
    """The server wrote the window's trace (or found nothing in it to replay)."""

    replay: WindowReplay
    span_s: float


@dataclass
class TenantKeyFound(Message):
    """The server refused an operator route to this key (403): it is a tenant's. Sent once;
    the dashboard then hides the controls only an operator key may use."""


@dataclass
class PolicyChoicesLoaded(Message):
    """The server's policy names, to offer in the switch dialog (None: a server that does not
    publish them, whose names are typed)."""

    choices: PolicyChoices | None


@dataclass
class ActionDone(Message):
    """An operator action finished (``ok``) or was refused, with text for the operator."""

    action: str
    program_id: str
    ok: bool
    text: str
