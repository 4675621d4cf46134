"""Program rows pre-formatted as one line of text each.

Textual's DataTable renders every visible cell through Rich on each repaint, and it repaints
all visible rows whenever any cell changes; with eight cells a row that is ~100 ms a frame at
45 rows. The program list therefore uses a single-column table whose cells are whole lines laid
out here (and a header line of the same widths), which is about eight times cheaper.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.text import Text

from agentconsole.ui.client.programs import ProgramSummary
from agentconsole.ui.tui import fmt

LABELS = ("Program", "Tenant", "State", "Nodes", "Service", "Priority", "CP idle", "Slack")
RIGHT = frozenset({3, 4, 6, 7})  # numeric columns
GAP = 1
MIN_ID = 9


def cells(p: ProgramSummary) -> tuple[str, ...]:
    """The plain text of one program's columns, in :data:`LABELS` order."""
    return (
        p.program_id,
        p.tenant,
        f"{fmt.STATE_GLYPHS.get(p.state, '?')} {p.state}",
        f"{p.nodes_done}/{p.nodes_known}",
        fmt.secs(p.attained_service_s),
        fmt.short(p.priority, 12),
        fmt.secs(p.critical_path_idle_s),
        fmt.secs(p.deadline_slack_s),
    )


def styles(p: ProgramSummary) -> tuple[str, ...]:
    """The style of each column of one program (state colour, a missed deadline in red)."""
    late = p.deadline_slack_s is not None and p.deadline_slack_s < 0
    state = fmt.STATE_STYLES.get(p.state, "")
    return ("", "", state, "", "", "", "", "bold red" if late else "")


def widths(rows: Iterable[Sequence[str]], room: int) -> tuple[int, ...]:
    """Column widths fitting ``room`` cells: every column as wide as its widest value (or
    label), except the program id, which gives way (down to :data:`MIN_ID`) when space is short.
    """
    wide = [len(label) + 2 for label in LABELS]  # room for the sort arrow
    for row in rows:
        for i, value in enumerate(row):
            wide[i] = max(wide[i], len(value))
    others = sum(wide[1:]) + GAP * (len(LABELS) - 1)
    wide[0] = max(MIN_ID, min(wide[0], room - others))
    return tuple(wide)


def line(values: Sequence[str], looks: Sequence[str], sizes: Sequence[int]) -> Text:
    """One row (or the header) laid out to ``sizes``."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, (value, look, size) in enumerate(zip(values, looks, sizes, strict=True)):
        shown = fmt.middle(value, size) if i == 0 else fmt.short(value, size)
        padded = shown.rjust(size) if i in RIGHT else shown.ljust(size)
        text.append(padded, style=look)
        if i < len(sizes) - 1:
            text.append(" " * GAP)
    return text


def header(sizes: Sequence[int], sort_column: int = -1, reverse: bool = False) -> Text:
    """The header line for ``sizes``, with an arrow on the sort column."""
    arrow = " ▼" if reverse else " ▲"
    labels = [label + (arrow if i == sort_column else "") for i, label in enumerate(LABELS)]
    looks = ["bold cyan" if i == sort_column else "bold" for i in range(len(LABELS))]
    return line(labels, looks, sizes)
