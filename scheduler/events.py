"""Timestamped events: the single source of truth for every number the product shows.

The controller and the runtimes record what happened as :class:`Event` values; metrics
(`agentconsole.scheduler.metrics`), the DuckDB store, the SSE feed and both consoles are
projections of the same stream, so no number is computed in two places (the vLLM v1 design).

Times are seconds: virtual seconds under ``bench``, wall-clock epoch seconds under ``serve``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

Scalar = float | int | str | bool | None
EMPTY: Mapping[str, Scalar] = MappingProxyType({})


class EventKind(StrEnum):
    """What happened. The string values are stable: they are stored and sent over the wire."""

    PROGRAM_CREATED = "program.created"
    PROGRAM_FINISHED = "program.finished"
    PROGRAM_FAILED = "program.failed"
    PROGRAM_CANCELLED = "program.cancelled"
    #: a wait at the program door ended (let in, left, or the program ended there): ``door_s``
    PROGRAM_DOOR_WAITED = "program.door_waited"

    NODE_ADDED = "node.added"
    NODE_READY = "node.ready"
    NODE_CANCELLED = "node.cancelled"

    CALL_QUEUED = "call.queued"
    CALL_SCHEDULED = "call.scheduled"
    CALL_FIRST_TOKEN = "call.first_token"
    CALL_PREEMPTED = "call.preempted"
    CALL_FINISHED = "call.finished"
    CALL_ABORTED = "call.aborted"
    CALL_FAILED = "call.failed"

    TOOL_STARTED = "tool.started"
    TOOL_FINISHED = "tool.finished"
    #: an operator settled a tool call left in doubt (``commit`` or ``retry``): its intent's
    #: state changed, nothing of its node did
    TOOL_RECONCILED = "tool.reconciled"

    KV_OFFLOADED = "kv.offloaded"
    KV_RELOADED = "kv.reloaded"
    KV_DROPPED = "kv.dropped"
    KV_EVICTED = "kv.evicted"
    KV_RECOMPUTED = "kv.recomputed"
    KV_DECISION = "kv.decision"

    ENGINE_STATS = "engine.stats"

    OPERATOR_ACTION = "operator.action"
    POLICY_CHANGED = "policy.changed"
    GHOST_TOKENS = "call.ghost_tokens"


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened at time ``t``.

    ``data`` holds the kind-specific numbers (token counts, durations, outcomes) as JSON
    scalars, so an event can be stored and streamed without a per-kind schema.
    """

    t: float
    kind: EventKind
    program_id: str = ""
    node_id: str = ""
    attempt: int = 0
    tenant: str = ""
    data: Mapping[str, Scalar] = field(default_factory=lambda: EMPTY)

    def to_json(self) -> dict[str, Scalar | dict[str, Scalar]]:
        """A JSON-ready dict (the wire and store shape)."""
        return {
            "t": self.t,
            "kind": self.kind.value,
            "program_id": self.program_id,
            "node_id": self.node_id,
            "attempt": self.attempt,
            "tenant": self.tenant,
            "data": dict(self.data),
        }


class EventSink(Protocol):
    """Anything that accepts events: the in-memory log, the store writer, the SSE hub."""

    def emit(self, event: Event) -> None:
        """Record ``event``. Must not block for long: producers are on the hot path."""


class EventLog:
    """An in-memory, append-only event list with optional subscribers.

    Used by ``bench`` (metrics are computed from ``events`` at the end of a run) and by
    ``serve`` (subscribers forward each event to the store writer and the SSE hub).
    ``keep=False`` turns it into a pure fan-out with no retained history.
    """

    __slots__ = ("_keep", "_subscribers", "events")

    def __init__(self, *, keep: bool = True) -> None:
        self.events: list[Event] = []
        self._keep = keep
        self._subscribers: list[Callable[[Event], None]] = []

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        """Call ``callback`` for every later event, in emission order."""
        self._subscribers.append(callback)

    def emit(self, event: Event) -> None:
        if self._keep:
            self.events.append(event)
        for callback in self._subscribers:
            callback(event)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block, then restore its state.

    For batch work that keeps its events alive: a simulated hour (``bench``) holds ~230,000
    events and their programs, and so does the metrics pass over them, so every full
    collection meanwhile rescans millions of objects that are all still in use (measured: a
    quarter of a run's wall time). Nothing such a batch frees depends on the collector; the
    few cycles it leaves are collected once the pause ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
