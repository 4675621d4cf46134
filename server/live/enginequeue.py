"""What the engines run while calls wait in their queue: the batch that prices the drain on
a call's ticket (``scheduler/backlog.py``).

Read from each runtime's memory view, at most every ``READ_EVERY_S`` per runtime, and per
program only where the runtime sums several engines (data-parallel ranks, models: a rank's
queue is its own): on SGLang a read parses the plugin's status file, which the plugin
publishes about as often, so reading it for every call would cost the API its overhead budget
and tell nothing newer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from agentconsole.scheduler.backlog import drain_batch
from agentconsole.scheduler.runtime import MemoryView, Runtime

#: how old a runtime's memory view may be before the next call reads it again
READ_EVERY_S = 0.05
#: views kept before those older than ``READ_EVERY_S`` are dropped (one per model, and one per
#: program that asked within the last ``READ_EVERY_S``: a busy server must not keep them all)
_VIEWS_KEPT = 256


class EngineQueues:
    """The served models' runtimes' queues and batches, read lazily (see the module
    docstring)."""

    def __init__(
        self, runtimes: Mapping[str, Runtime], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._runtimes = runtimes
        self._clock = clock
        #: (model, program or None: the whole runtime) -> (when read, its view)
        self._read: dict[tuple[str, str | None], tuple[float, MemoryView]] = {}

    def behind(self, model: str, program_id: str | None = None) -> int:
        """The calls every model's engines run now if the queue the call waits in is a
        backlog (as long as its batch at least), else 0 (``backlog.drain_batch``). The queue:
        that of the engine of ``model`` the program runs on (its data-parallel rank, as
        ``bench --replicas`` asks of the replica a call is placed on), ``model``'s whole
        runtime's for no program or one that ran nowhere yet. Every model's batch: the
        backlog counts every program's remaining calls, whichever model they go to."""
        here = self._view(model, program_id)
        running = (self._view(name).running_calls for name in self._runtimes)
        return drain_batch(here.queued_calls, here.running_calls, running)

    def _view(self, model: str, program_id: str | None = None) -> MemoryView:
        """``model``'s runtime's memory (of ``program_id``'s engine when given and the runtime
        has several), read again once older than ``READ_EVERY_S``."""
        whole = self._read_view(model, None)
        if program_id is None or whole.engines <= 1:
            return whole  # one engine: every program's view is the whole runtime's
        return self._read_view(model, program_id)

    def _read_view(self, model: str, program_id: str | None) -> MemoryView:
        now = self._clock()
        key = (model, program_id)
        read = self._read.get(key)
        if read is None or now - read[0] >= READ_EVERY_S:
            view = self._runtimes[model].memory(program_id)
            self._read.pop(key, None)  # re-inserted last: the dict stays oldest first
            while len(self._read) >= _VIEWS_KEPT:
                # the oldest read goes (a whole runtime's too: it is read again when asked)
                del self._read[next(iter(self._read))]
            read = self._read[key] = (now, view)
        return read[1]
