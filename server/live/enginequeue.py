"""What the engines run while calls wait in their queue: the batch that prices the drain on
a call's ticket (``scheduler/backlog.py``).

Read from each runtime's memory view, at most every ``READ_EVERY_S`` per runtime: on SGLang a
read parses the plugin's status file, which the plugin publishes about as often, so reading it
for every call would cost the API its overhead budget and tell nothing newer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from agentconsole.scheduler.backlog import drain_batch
from agentconsole.scheduler.runtime import MemoryView, Runtime

#: how old a runtime's memory view may be before the next call reads it again
READ_EVERY_S = 0.05


class EngineQueues:
    """The served models' runtimes' queues and batches, read lazily (see the module
    docstring)."""

    def __init__(
        self, runtimes: Mapping[str, Runtime], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._runtimes = runtimes
        self._clock = clock
        self._read: dict[str, tuple[float, MemoryView]] = {}

    def behind(self, model: str) -> int:
        """The calls every model's engines run now if ``model``'s queue is a backlog (as long
        as its batch at least), else 0 (``backlog.drain_batch``). Every model's: the backlog
        counts every program's remaining calls, whichever model they go to."""
        here = self._view(model)
        running = (self._view(name).running_calls for name in self._runtimes)
        return drain_batch(here.queued_calls, here.running_calls, running)

    def _view(self, model: str) -> MemoryView:
        now = self._clock()
        read = self._read.get(model)
        if read is None or now - read[0] >= READ_EVERY_S:
            read = self._read[model] = (now, self._runtimes[model].memory())
        return read[1]
