"""A thread-safe hand-over of feed events from the feed worker to the UI thread.

The worker appends every batch; the UI drains everything at once when it gets round to it. The
worker posts a wake-up message only when the buffer goes from empty-and-drained to pending, so
a burst of a thousand batches costs the UI one message and one redraw. If the UI stalls for
long, the oldest events are dropped (and counted) rather than growing without bound.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from agentconsole.ui.client.models import FeedEvent


class FeedBuffer:
    """Events waiting for the UI; see the module docstring."""

    __slots__ = ("_events", "_lock", "_pending", "dropped")

    def __init__(self, capacity: int = 5000) -> None:
        self._events: deque[FeedEvent] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._pending = False
        self.dropped = 0

    def push(self, events: Iterable[FeedEvent]) -> bool:
        """Add ``events``; return True when the caller should wake the UI."""
        with self._lock:
            room = self._events.maxlen or 0
            for event in events:
                if len(self._events) == room:
                    self.dropped += 1
                self._events.append(event)
            wake = not self._pending
            self._pending = True
            return wake

    def drain(self) -> list[FeedEvent]:
        """Take every waiting event (oldest first) and re-arm the wake-up."""
        with self._lock:
            out = list(self._events)
            self._events.clear()
            self._pending = False
            return out
