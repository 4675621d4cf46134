"""The books of mid-prompt insertions (``insertions.py``): per program and node, per tenant and
in total, from the ``call.finished`` / ``call.aborted`` events that carry one.

A hub subscriber like the metrics: accounting puts an insertion's numbers in the call's end
event (``insertion_at_tokens``, ``inserted_tokens``, ``lost_reuse_tokens``), so the store's
event log, the SSE feed and these books all see the same facts. Tenant and platform totals
cover the events since the server started (as the overview's other counts); a program's own
numbers also go into its stored rows (the projector calls :meth:`annotate_program` and
:meth:`annotate_node`) and come back when it is reopened after a restart (:meth:`adopt`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentconsole.scheduler.events import Event, EventKind, Scalar

JSON = dict[str, Any]
#: the end event's data keys (``CallAccounting`` writes them)
AT, INSERTED, LOST = "insertion_at_tokens", "inserted_tokens", "lost_reuse_tokens"
#: the JSON keys of a program's, tenant's or the platform's figures
PROGRAM_KEY, NODE_KEY = "prompt_insertions", "prompt_insertion"
_ENDS = (EventKind.CALL_FINISHED, EventKind.CALL_ABORTED)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


@dataclass(slots=True)
class Tally:
    """Insertions counted, the tokens they inserted and the reuse they lost."""

    count: int = 0
    inserted_tokens: int = 0
    lost_reuse_tokens: int = 0

    def add(self, inserted: int, lost: int, count: int = 1) -> None:
        self.count += count
        self.inserted_tokens += inserted
        self.lost_reuse_tokens += lost

    def json(self) -> JSON:
        return {
            "count": self.count,
            "inserted_tokens": self.inserted_tokens,
            "lost_reuse_tokens": self.lost_reuse_tokens,
        }


def empty() -> JSON:
    """The figures of nothing inserted (a program or tenant without insertions)."""
    return Tally().json()


@dataclass(slots=True)
class _ProgramBook:
    total: Tally = field(default_factory=Tally)
    #: node id -> its latest attempt's insertion (``{at_token, inserted_tokens, ...}``)
    nodes: dict[str, JSON] = field(default_factory=dict)


def insertion_data(at_token: int, inserted: int, lost: int) -> dict[str, Scalar]:
    """The end event's data keys of one insertion."""
    return {AT: at_token, INSERTED: inserted, LOST: lost}


class InsertionBook:
    """See the module docstring; :meth:`observe` is the hub subscriber."""

    def __init__(self) -> None:
        self.total = Tally()
        self._tenants: dict[str, Tally] = {}
        self._programs: dict[str, _ProgramBook] = {}

    def observe(self, event: Event) -> None:
        """Hub subscriber: count an end event that carries an insertion."""
        data = event.data
        if INSERTED not in data or event.kind not in _ENDS:
            return
        inserted, lost = _int(data.get(INSERTED)), _int(data.get(LOST))
        self.total.add(inserted, lost)
        self._tenants.setdefault(event.tenant, Tally()).add(inserted, lost)
        book = self._programs.setdefault(event.program_id, _ProgramBook())
        book.total.add(inserted, lost)
        if event.node_id:
            book.nodes[event.node_id] = {
                "at_token": _int(data.get(AT)),
                "inserted_tokens": inserted,
                "lost_reuse_tokens": lost,
            }

    def tenant(self, name: str) -> JSON:
        tally = self._tenants.get(name)
        return tally.json() if tally is not None else empty()

    def program(self, program_id: str) -> JSON:
        book = self._programs.get(program_id)
        return book.total.json() if book is not None else empty()

    def node(self, program_id: str, node_id: str) -> JSON | None:
        book = self._programs.get(program_id)
        return book.nodes.get(node_id) if book is not None else None

    def annotate_program(self, program_id: str, out: JSON) -> JSON:
        """Add ``prompt_insertions`` to a program's JSON (and ``prompt_insertion`` to each of
        its ``nodes``, when it lists them); returns ``out``."""
        out[PROGRAM_KEY] = self.program(program_id)
        for node in out.get("nodes") or ():
            self.annotate_node(program_id, node)
        return out

    def annotate_node(self, program_id: str, node: JSON) -> JSON:
        """Add ``prompt_insertion`` (None: none at that node) to a node's JSON."""
        node[NODE_KEY] = self.node(program_id, str(node.get("node_id", "")))
        return node

    def adopt(self, program_id: str, stored: Mapping[str, Any], nodes: Iterable[JSON]) -> None:
        """Take a reopened program's figures back from its stored rows (``stored``: the
        program row's data; ``nodes``: its nodes' data), so they are not lost when its rows
        are written again. Tenant and platform totals stay those since this server started."""
        figures = stored.get(PROGRAM_KEY)
        if not isinstance(figures, Mapping) or not _int(figures.get("count")):
            return
        book = self._programs.setdefault(program_id, _ProgramBook())
        book.total = Tally(
            _int(figures.get("count")),
            _int(figures.get("inserted_tokens")),
            _int(figures.get("lost_reuse_tokens")),
        )
        for node in nodes:
            at = node.get(NODE_KEY)
            if isinstance(at, Mapping):
                book.nodes[str(node.get("node_id", ""))] = dict(at)

    def forget(self, program_id: str) -> None:
        """Drop a program that left memory (its rows keep its figures)."""
        self._programs.pop(program_id, None)

    def counters(self) -> dict[str, float]:
        """Platform totals for Prometheus (series name without prefix -> value)."""
        t = self.total
        return {
            "prompt_insertions_total": float(t.count),
            "prompt_inserted_tokens_total": float(t.inserted_tokens),
            "lost_reuse_tokens_total": float(t.lost_reuse_tokens),
        }
