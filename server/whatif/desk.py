"""The what-if desk of a running server: export a window, optionally bench it, read the run.

``POST /v1/operator/whatif`` calls :meth:`WhatIfDesk.export`, ``GET /v1/operator/whatif/run``
reads :meth:`WhatIfDesk.run_json`. Traces go under one directory the server owns (the oldest
beyond ``keep`` are deleted); at most one bench runs at a time (:mod:`runs`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentconsole.server.live.errors import InvalidRequest, NotFound, ServiceError
from agentconsole.server.whatif.runs import BenchRunner
from agentconsole.server.whatif.window import (
    BenchHardware,
    CursorFactory,
    WindowTrace,
    export_window,
    prune,
)

EMPTY = "no program of the window ran: nothing to replay"


class Unwritable(ServiceError):
    """The trace directory cannot be written (a server setting to fix, not the request)."""

    status = 503
    type = "unavailable"


@dataclass(frozen=True, slots=True)
class WhatIfSettings:
    """Where traces go, how many are kept, and the bounds of a background bench run."""

    directory: Path
    keep: int = 20
    run_timeout_s: float = 300.0
    run_jobs: int = 1


class WhatIfDesk:
    """Exports windows of the live store (read through ``cursor``, after ``flush`` has
    committed what the live programs did so far) and runs bench on them."""

    def __init__(
        self,
        cursor: CursorFactory,
        settings: WhatIfSettings,
        hardware: BenchHardware,
        flush: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.cursor = cursor
        self.flush = flush
        self.settings = settings
        self.hardware = hardware
        self.runner = BenchRunner(settings.run_timeout_s, settings.run_jobs)

    async def export(
        self,
        *,
        since: float | None,
        until: float | None,
        tenant: str | None,
        run: bool,
        kv_policy: str | None = None,
    ) -> dict[str, Any]:
        """Write the window's trace (none when no program of it ran), prune old traces, and
        with ``run`` start a bench on it. Raises :class:`InvalidRequest` for ``until`` not
        after ``since``, :class:`Unwritable` when the directory cannot be written and
        ``Conflict`` for ``run`` while a bench runs (checked before anything is written)."""
        if since is not None and until is not None and until <= since:
            raise InvalidRequest("'until' must be after 'since'", field="until")
        if run:
            self.runner.check_idle()
        hardware = replace(self.hardware, kv_policy=kv_policy or self.hardware.kv_policy)
        directory = self.settings.directory
        if self.flush is not None:  # the store's rows lag the live programs by up to 1 s
            await self.flush()
        try:
            window = await asyncio.to_thread(
                export_window,
                self.cursor,
                directory,
                hardware,
                since=since,
                until=until,
                tenant=tenant,
            )
        except OSError as error:
            raise Unwritable(f"cannot write the trace under {directory}: {error}") from error
        answer = _answer(window)
        if window.path is not None:
            latest = self.runner.latest
            spare = [window.path]  # the answer names it, and a run may be asked of it
            if latest is not None and self.runner.busy:
                spare.append(latest.trace)
            await asyncio.to_thread(prune, directory, self.settings.keep, spare)
            if run:
                started = self.runner.start(window.argv, window.path, answer["command"])
                answer["run"] = started.json()
        return answer

    def run_json(self) -> dict[str, Any]:
        """The latest bench run. Raises :class:`NotFound` before the first."""
        latest = self.runner.latest
        if latest is None:
            raise NotFound("no bench run since the server started: POST with 'run': true")
        return latest.json()

    def stop(self) -> None:
        """Kill a bench in progress (server shutdown). Blocking, briefly."""
        self.runner.stop()


def _answer(window: WindowTrace) -> dict[str, Any]:
    return {
        "since": window.since,
        "until": window.until,
        "tenant": window.tenant,
        "programs": window.programs,
        "path": str(window.path) if window.path is not None else None,
        "command": window.command,
        "message": EMPTY if window.path is None else f"{window.programs} programs written",
        "run": None,
    }
