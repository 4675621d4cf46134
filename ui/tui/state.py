"""What the dashboard knows: the latest answer of every read, the overview history and the tail.

Pure data with no Textual in it, so it can be tested and benchmarked alone. Widgets read it;
message handlers in the app write it. Feed events adjust program states at once (a cancel
shows before the next poll) and name the programs whose detail should be reloaded.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from agentconsole.ui.client.door import Door
from agentconsole.ui.client.models import AuditEntry, FeedEvent, KVState, Overview, TenantRow
from agentconsole.ui.client.programs import ProgramDetail, ProgramPage, ProgramSummary
from agentconsole.ui.client.toolcalls import ToolCallBoard

TERMINAL_KINDS = {
    "program.finished": "finished",
    "program.failed": "failed",
    "program.cancelled": "cancelled",
}
HISTORY = 120
TAIL = 1000


@dataclass(frozen=True, slots=True)
class Sample:
    """One overview tick, for the sparklines."""

    throughput: float
    goodput: float
    queue_depth: int
    running_calls: int
    p95: float


@dataclass(frozen=True, slots=True)
class ReadFailure:
    """A read whose last try failed: the error and since when it has failed so."""

    error: str
    since: float


class DashboardState:
    """The client-side model of the server, fed by polls and the SSE feed."""

    def __init__(self) -> None:
        self.overview: Overview | None = None
        self.history: deque[Sample] = deque(maxlen=HISTORY)
        self.programs: dict[str, ProgramSummary] = {}
        self.programs_total = 0
        self.programs_version = 0
        self.detail: ProgramDetail | None = None
        self.tenants: list[TenantRow] = []
        #: the admission door; None until read, and for a key the server refuses it
        self.door: Door | None = None
        self.kv: KVState | None = None
        self.audit: list[AuditEntry] = []
        #: the tool calls that need an operator and the side effects running; None until
        #: read, and for a key the server refuses them
        self.tool_calls: ToolCallBoard | None = None
        self.events: deque[FeedEvent] = deque(maxlen=TAIL)
        self.events_seen = 0
        self.feed_live = False
        self.feed_detail = "connecting"
        #: read name (a view's, ``door``, ``program <id>``) -> when it last succeeded
        self.read_at: dict[str, float] = {}
        #: the reads whose last try failed: what they show is stale until one succeeds
        self.failures: dict[str, ReadFailure] = {}

    def read_succeeded(self, what: str, at: float) -> None:
        """Read ``what`` answered at ``at``: its data is fresh, and a later failure is news."""
        self.read_at[what] = at
        self.failures.pop(what, None)

    def read_failed(self, what: str, error: str, at: float) -> bool:
        """Read ``what`` failed with ``error`` at ``at``. True when that is news (the read
        was fine, or failed otherwise): a failure repeated every poll is reported once per
        outage, and again after a recovery."""
        known = self.failures.get(what)
        if known is not None and known.error == error:
            return False
        self.failures[what] = ReadFailure(error, at)
        return True

    def set_overview(self, overview: Overview, *, sample: bool = True) -> None:
        """Take a new overview; append it to the history when it is a ``sample``.

        Only the feed's once-a-second overviews are samples, so the sparklines have an even
        time axis; an overview read by a poll updates the numbers only.
        """
        self.overview = overview
        if not sample:
            return
        self.history.append(
            Sample(
                throughput=overview.throughput,
                goodput=overview.goodput,
                queue_depth=overview.queue_depth,
                running_calls=overview.running_calls,
                p95=overview.e2e_p95_s or 0.0,
            )
        )

    def set_programs(self, page: ProgramPage) -> None:
        """Replace the program list with a fresh poll."""
        self.programs = {p.program_id: p for p in page.programs}
        self.programs_total = page.total
        self.programs_version += 1

    def set_detail(self, detail: ProgramDetail) -> None:
        """Take a fresh program detail; its summary also updates the list row."""
        self.detail = detail
        summary = detail.summary
        if summary.program_id in self.programs and self.programs[summary.program_id] != summary:
            self.programs[summary.program_id] = summary
            self.programs_version += 1

    def apply_events(self, events: Iterable[FeedEvent]) -> set[str]:
        """Append ``events`` to the tail; return the ids of the programs they concern.

        A program's terminal event sets its state in the list immediately.
        """
        touched: set[str] = set()
        changed = False
        for event in events:
            self.events.append(event)
            self.events_seen += 1
            if not event.program_id:
                continue
            touched.add(event.program_id)
            new_state = TERMINAL_KINDS.get(event.kind)
            row = self.programs.get(event.program_id)
            if new_state and row is not None and row.state != new_state:
                self.programs[event.program_id] = dataclasses.replace(row, state=new_state)
                changed = True
        if changed:
            self.programs_version += 1
        return touched

    def set_feed(self, live: bool, detail: str) -> None:
        """Record the feed's connection state."""
        self.feed_live = live
        self.feed_detail = detail
