"""Filtering and sorting of the program list (the ``/`` filter and the ``s`` sort of k9s).

Filter syntax: words must all match (case-insensitive substring of id, tenant, state or a
``key:value`` label); a leading ``!`` inverts the whole filter (k9s ``/!``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agentconsole.ui.client.programs import ProgramSummary


def _progress(p: ProgramSummary) -> float:
    return p.nodes_done / p.nodes_known if p.nodes_known else 0.0


def _slack(p: ProgramSummary) -> float:
    return p.deadline_slack_s if p.deadline_slack_s is not None else float("inf")


SORTS: dict[str, Callable[[ProgramSummary], Any]] = {
    "program": lambda p: p.program_id,
    "tenant": lambda p: (p.tenant, p.program_id),
    "state": lambda p: (p.state, p.program_id),
    "progress": _progress,
    "service": lambda p: p.attained_service_s,
    "priority": lambda p: p.priority_sort,
    "cp idle": lambda p: p.critical_path_idle_s,
    "slack": _slack,
}
SORT_ORDER = tuple(SORTS)


def haystack(p: ProgramSummary) -> str:
    """The text a filter word is matched against."""
    labels = " ".join(f"{k}:{v}" for k, v in p.labels.items())
    return f"{p.program_id} {p.tenant} {p.state} {labels}".lower()


def matches(p: ProgramSummary, query: str) -> bool:
    """Whether ``p`` passes the filter ``query`` (empty passes everything)."""
    query = query.strip()
    invert = query.startswith("!")
    words = query.lstrip("!").lower().split()
    if not words:
        return True
    text = haystack(p)
    hit = all(word in text for word in words)
    return hit != invert


def select(
    programs: Iterable[ProgramSummary], query: str, sort: str, reverse: bool
) -> list[ProgramSummary]:
    """The programs that pass ``query``, ordered by the ``sort`` column.

    Unknown sort names fall back to the program id; ties keep the id order.
    """
    key = SORTS.get(sort, SORTS["program"])
    chosen = [p for p in programs if matches(p, query)]
    chosen.sort(key=lambda p: p.program_id)
    chosen.sort(key=key, reverse=reverse)
    return chosen


def next_sort(current: str) -> str:
    """The sort column after ``current`` (wrapping round)."""
    index = SORT_ORDER.index(current) if current in SORT_ORDER else -1
    return SORT_ORDER[(index + 1) % len(SORT_ORDER)]
