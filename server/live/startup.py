"""Serve's start-up and shutdown steps below the HTTP layer, in the order they must run.

Start-up restores what the store remembers before the first request: the running programs
(rows plus the event log's tail, ``reopen.py``), adopted by the metrics with their door waits;
what finished programs and tools taught the scheduler; the operator's standing decisions (pins,
drain, policy switches) from the audit log. Then the background tasks start, the projector
recording what the calls in flight have streamed (a crash's restart charges it). Shutdown stops
them, then the calls, the runtime and the store, the store last so the rows written on the way
out are committed.

The lifespan in ``server/app.py`` calls these with its ``Live``, which :class:`ServingParts`
describes without importing the HTTP layer or the what-if desk (both import this package).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentconsole.scheduler.learned import RELEARN_PER_GROUP, RELEARNED
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.program import Program
from agentconsole.server.live.accounting import streamed_tokens
from agentconsole.server.live.doorwaits import door_spans, door_waits_since
from agentconsole.server.live.operator import REMEMBERED_ACTIONS, OperatorDesk, OperatorMemory
from agentconsole.server.live.projector import Streamed
from agentconsole.server.live.queries import ProgramQueries
from agentconsole.server.live.reopen import programs_to_restore
from agentconsole.server.live.service import ProgramService
from agentconsole.server.live.snapshots import MetricRecorder
from agentconsole.server.live.sweeper import Sweeper
from agentconsole.server.live.tenants import WINDOW_S
from agentconsole.server.store.catalog import TenantRecord
from agentconsole.server.store.store import Store


class StoppableDesk(Protocol):
    """The what-if desk as shutdown sees it (``server/whatif`` imports this package)."""

    def stop(self) -> None: ...


class ServingParts(Protocol):
    """The live objects start-up restores into and shutdown stops (``server.api.deps.Live``)."""

    @property
    def store(self) -> Store: ...

    @property
    def service(self) -> ProgramService: ...

    @property
    def metrics(self) -> MetricsAggregator: ...

    @property
    def queries(self) -> ProgramQueries: ...

    @property
    def desk(self) -> OperatorDesk: ...

    @property
    def whatif(self) -> StoppableDesk: ...


@dataclass(frozen=True, slots=True)
class HousekeepingTimes:
    """How the background tasks pace themselves (the server config's figures)."""

    program_idle_s: float
    pending_tool_s: float
    retain_finished_s: float
    metrics_snapshot_s: float


@dataclass(frozen=True, slots=True)
class Background:
    """The tasks serve runs beside its requests, from :func:`start_background` to
    :func:`shut_down`."""

    runtime_start: asyncio.Task[None]
    sweeper: Sweeper
    recorder: MetricRecorder


async def restore_from_store(live: ServingParts) -> None:
    """Bring back what the store remembers. Changes the service's programs (the running ones
    reopened), the metrics (which adopt them), the driver's learners, the projector's marks
    (every program written again, so the next restart's event tail starts here) and the
    operator's standing decisions (replayed through the desk) and each tenant's tokens of the
    last minute (``tokens_per_minute``)."""
    restored = await _reopen_running_programs(live)
    await _learn_from_the_log(live, restored)
    ends = await asyncio.to_thread(live.store.repo.call_ends_since, time.time() - WINDOW_S)
    live.service.tenants.recharge(ends)
    live.queries.projector.mark_all()
    await live.queries.projector.sync()
    await _replay_operator_decisions(live)


async def _reopen_running_programs(live: ServingParts) -> list[Program]:
    """Programs survive a restart: rows plus the event log's tail (``reopen.py``). Returns
    the programs reopened."""
    return [
        program
        for view, tail in await asyncio.to_thread(programs_to_restore, live.store.repo)
        if (program := live.service.reopen(view, tail)) is not None
    ]


async def _learn_from_the_log(live: ServingParts, restored: Sequence[Program]) -> None:
    """What the event log still teaches, read in one scan of it: the metrics follow the
    ``restored`` programs without a second ``program.created``, their stored door waits
    included (``doorwaits.py``); and what finished programs and tools taught the scheduler
    (calls, sizes, runs, latencies) is learned again from their latest end events."""
    logged = await asyncio.to_thread(
        live.store.repo.restart_events,
        RELEARNED,
        RELEARN_PER_GROUP,
        door_waits_of=[program.program_id for program in restored],
        door_since=door_waits_since(restored),
    )
    door = door_spans(logged.door_waits)
    for program in restored:
        live.metrics.adopt(program, door.get(program.program_id, ()))
    live.service.driver.relearn(logged.latest)


async def _replay_operator_decisions(live: ServingParts) -> None:
    """The operator's standing decisions (pins, drain, policies), replayed from the audit
    log, where each is durable (``operator.py``)."""
    kept = await asyncio.to_thread(live.store.repo.succeeded_actions, *REMEMBERED_ACTIONS)
    await live.desk.restore(OperatorMemory.of((a.action, a.args) for a in kept))


def record_tenants(store: Store, tenants: Iterable[str]) -> None:
    """A catalog row for each tenant that has a key (queued on the store's writer)."""
    now = time.time()
    for tenant in tenants:
        store.writer.put(TenantRecord(tenant, tenant, now, now))


def start_background(
    live: ServingParts,
    times: HousekeepingTimes,
    start_runtime: Callable[[], Coroutine[Any, Any, None]],
) -> Background:
    """Start the runtime in the background (``/health`` answers at once, ``/ready`` waits for
    it), then the projector (following the service's calls in flight), the sweeper and the
    metric recorder."""
    projector = live.queries.projector
    service = live.service
    projector.follow_streams(lambda: calls_streaming(service))
    sweeper = Sweeper(
        live.service,
        program_idle_s=times.program_idle_s,
        pending_tool_s=times.pending_tool_s,
        retain_s=times.retain_finished_s,
        before_forget=projector.write_program,
    )
    recorder = MetricRecorder(
        live.metrics,
        live.service.runtime.snapshot,
        live.store.writer.put,
        interval_s=times.metrics_snapshot_s,
    )
    runtime_start = asyncio.create_task(start_runtime(), name="runtime-start")
    projector.start()
    sweeper.start()
    recorder.start()
    return Background(runtime_start, sweeper, recorder)


def calls_streaming(service: ProgramService) -> list[Streamed]:
    """What each of ``service``'s calls in flight has streamed so far, for the projector."""
    return [
        Streamed(call.program_id, call.node_id, call.request.ticket.attempt, streamed_tokens(call))
        for call in service.calls.values()
    ]


async def shut_down(live: ServingParts, background: Background) -> None:
    """Stop what :func:`start_background` started, then the calls in flight, the runtime, the
    what-if runs, the projector (the last rows) and the store (commit, checkpoint)."""
    try:
        await background.sweeper.stop()
        await background.recorder.stop()
        background.runtime_start.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await background.runtime_start
        await live.service.stop()
        await live.service.runtime.stop()
        await asyncio.to_thread(live.whatif.stop)
    finally:
        # whatever failed above, the last rows and the store's close (its commit and
        # checkpoint) still happen: the writer's threads are daemons, gone with the process
        try:
            await live.queries.projector.stop()
        finally:
            await asyncio.to_thread(live.store.close)
