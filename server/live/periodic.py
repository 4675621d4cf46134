"""A coroutine run every ``interval_s`` in one asyncio task, stopped by cancelling it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Periodic:
    """Runs ``tick()`` every ``interval_s`` after :meth:`start` until :meth:`stop`. An error
    in one tick is logged and the next tick runs anyway (housekeeping must not die)."""

    def __init__(self, name: str, interval_s: float, tick: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self.interval_s = interval_s
        self._tick = tick
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the task and wait for it to end (a tick in progress is interrupted)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self._tick()
            except Exception:
                log.exception("%s failed", self.name)
