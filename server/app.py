"""The Litestar application: one factory, one lifespan that wires everything.

Start-up (the lifespan): open the store (its writer thread starts), create the event hub
(numbered after the store's last event), the runtime from the registry (its engine events go to
the hub), the live service, the metrics projections and the store projector; then start the
runtime *in the background* so ``/health`` answers at once while ``/ready`` says 503 until the
runtime answers. Shutdown, in reverse: close the SSE feeds, stop the sweeper, abort calls in
flight, stop the runtime, write the last rows, close the store (commit, checkpoint).

Extensions (the tool gateway, the consoles) plug in with :class:`Extension`: their handlers
and dependency providers are added to the app, ``start(live)`` runs once the live objects
exist, ``shut_down()`` when the server begins to stop (``serve`` calls it before the HTTP
server drains its connections) and ``stop()`` before the store closes. OpenAPI is served at
``/schema``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Protocol

from litestar import Litestar
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.plugins.pydantic import PydanticPlugin
from litestar.types import ControllerRouterHandler

from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.runtime import Runtime
from agentconsole.server.api.auth import KeyRing
from agentconsole.server.api.chat import ChatController
from agentconsole.server.api.completions import CompletionsController
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.api.contract import fix_options_allow, render_plugins
from agentconsole.server.api.deps import DEPENDENCIES, Live
from agentconsole.server.api.errors import handle_error
from agentconsole.server.api.express import ExpressLane, lane_fits
from agentconsole.server.api.jsonguard import GuardedRequest
from agentconsole.server.api.modelcompat import ModelCompatController
from agentconsole.server.api.observe import ObserveController
from agentconsole.server.api.operator import OperatorController
from agentconsole.server.api.programs import ProgramsController
from agentconsole.server.api.system import SystemController
from agentconsole.server.api.whatif import WhatIfController
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.observe import Observer
from agentconsole.server.live.operator import Audit, Note, OperatorDesk
from agentconsole.server.live.ownership import StoredIds
from agentconsole.server.live.projector import StoreProjector
from agentconsole.server.live.promptblocks import PromptBlockRecorder, redaction_from
from agentconsole.server.live.queries import ProgramQueries
from agentconsole.server.live.reopen import program_to_reopen
from agentconsole.server.live.service import DoorSettings, ProgramService
from agentconsole.server.live.startup import (
    Background,
    HousekeepingTimes,
    record_tenants,
    restore_from_store,
    shut_down,
    start_background,
)
from agentconsole.server.live.tenants import TenantBudgets
from agentconsole.server.prometheus import PrometheusMetrics
from agentconsole.server.runtime.fleet.build import build_runtime
from agentconsole.server.runtime.registry import RuntimeOptions, runtime_spec
from agentconsole.server.runtime.sim.costmodel import DEFAULT_PRESET_MODEL
from agentconsole.server.store.config import StoreConfig
from agentconsole.server.store.errors import StoreDamagedError, StoreError, StoreOpenError
from agentconsole.server.store.journal import OperatorAction
from agentconsole.server.store.store import Store
from agentconsole.server.whatif.desk import WhatIfDesk, WhatIfSettings
from agentconsole.server.whatif.window import BenchHardware

#: seconds of finished programs a live throughput or goodput is taken over
LIVE_RATE_WINDOW_S = 60.0

#: The cyclic collector's generation thresholds while serving (see the lifespan).
GC_THRESHOLDS = (50_000, 20, 10)
#: The GIL switch interval while serving (see the lifespan).
SWITCH_INTERVAL_S = 0.002

log = logging.getLogger(__name__)
API_VERSION = "1"


class Extension(Protocol):
    """A feature mounted on the app (see the module docstring)."""

    route_handlers: Sequence[ControllerRouterHandler]

    def dependencies(self) -> Mapping[str, Provide]: ...

    async def start(self, live: Live) -> None: ...

    def shut_down(self) -> None:
        """The server begins to stop, before the HTTP server waits for its open connections:
        answer (or end) what the extension has in flight, so no caller waits out the grace
        period for a bare 500. Synchronous; :meth:`stop` follows in the lifespan's end."""

    async def stop(self) -> None: ...


def _audit_writer(store: Store) -> Audit:
    async def audit(
        ts: float, actor: str, action: str, target: str, args: Mapping[str, Any], result: str
    ) -> None:
        record = OperatorAction(ts, actor, action, target, result, dict(args))
        await asyncio.wrap_future(store.writer.put_durable(record))

    return audit


def _audit_note(store: Store) -> Note:
    def note(
        ts: float, actor: str, action: str, target: str, args: Mapping[str, Any], result: str
    ) -> None:
        store.writer.put(OperatorAction(ts, actor, action, target, result, dict(args)))

    return note


def door_settings(config: ServerConfig) -> DoorSettings:
    """The program door the service runs under ``config`` (its memory share is the door's
    own default): what ``serve``'s banner describes. Its line shares starts between tenants
    by the weights the runtime's fairness guard shares service by (``runtime_extra``'s
    ``fairness``), as ``bench`` gives its door and its engines one config."""
    return DoorSettings(
        enabled=config.program_admission,
        wait_s=config.admission_wait_s,
        budget_tokens=config.admission_budget_tokens,
        shortest_first=config.admission_shortest_first,
        fairness=FairnessConfig.from_settings(config.runtime_extra.get("fairness")),
    )


def configured_runtime(config: ServerConfig, **extra: Any) -> Runtime:
    """The runtime ``config`` names, built (not started), ``extra`` over its options'. Raises
    what its factory raises for options it cannot serve (an unknown preset, say)."""
    options = RuntimeOptions(
        model=config.model,
        policy=config.policy,
        kv_policy=config.kv_policy,
        gpu=config.gpu,
        tp=config.tp,
        max_total_tokens=config.max_total_tokens,
        profile=config.profile,
        extra={**config.runtime_extra, **extra},
    )
    return build_runtime(config.runtime, options, config.served_models())


def build_live(config: ServerConfig, store: Store, runtime: Runtime | None, hub: EventHub) -> Live:
    """Wire the live objects around an open store (the runtime is not started)."""
    if runtime is None:
        runtime = configured_runtime(config, event_sink=hub)
    service = ProgramService(
        runtime,
        hub,
        policy=config.policy,
        kv_policy=config.kv_policy,
        ready_timeout_s=config.ready_timeout_s,
        stored_ids=StoredIds(store.repo.program_owner, store.repo.program_ids()),
        stored_program=partial(program_to_reopen, store.repo),
        door=door_settings(config),
        tenants=TenantBudgets(
            config.tenant_limits, config.tenant_overrides, store.repo.stored_bytes_by_tenant()
        ),
        model_name=config.model_name,
        selection=config.selection,
    )
    # bounded: serve runs for weeks; waits still running at the door count in the live figures;
    # rates over the last minute, what a console's "throughput" and a history chart mean
    metrics = MetricsAggregator(
        window=10_000,
        at_door=service.driver.door_waits,
        rate_window_s=LIVE_RATE_WINDOW_S,
        served_since=time.time(),
    )
    projector = StoreProjector(
        service.controller,
        store.writer,
        config.store_sync_s,
        last_seq=lambda: hub.last_seq,
        insertions=service.insertions,
        idle_of=metrics.critical_path_idle_s,
    )

    def gauges() -> dict[str, float]:
        running = sum(1 for p in service.controller.programs.values() if not p.state.terminal)
        return {
            "programs_running": running,
            "programs_at_door": float(service.door.waiting),
            "draining": float(service.draining),
        }

    def counters() -> dict[str, float]:
        writer = store.writer.stats  # the lanes' ints, read across threads: a snapshot
        return {
            **service.insertions.counters(),
            "store_commits_refused_total": writer.storage_failures,
            "store_checkpoints_total": writer.checkpoints,
            "store_checkpoints_skipped_total": writer.checkpoints_skipped,
            "store_items_dropped_total": writer.dropped,
        }

    prometheus = PrometheusMetrics(metrics, runtime.snapshot, gauges, counters=counters)
    subscribers = (
        store.writer.emit,
        metrics.observe,
        service.insertions.observe,  # before Prometheus and the projector read its books
        prometheus.observe,
        projector.observe,
        service.tenants.observe,
    )
    for subscriber in subscribers:
        hub.subscribe(subscriber)
    return Live(
        config=config,
        keys=KeyRing(config.tenant_keys, config.operator_keys),
        store=store,
        hub=hub,
        service=service,
        metrics=metrics,
        prometheus=prometheus,
        observer=Observer(service, metrics),
        queries=ProgramQueries(service, store, projector),
        desk=OperatorDesk(
            service,
            _audit_writer(store),
            _audit_note(store),
            committed=lambda: asyncio.wrap_future(store.writer.flush()),
        ),
        whatif=_whatif(config, store, projector.sync),
    )


def bench_hardware(config: ServerConfig) -> BenchHardware:
    """What the what-if benches on: a simulated runtime's own hardware (its GPU preset, model
    preset, tensor-parallel size and calibration profile); for a real engine, bench's defaults
    (the served engine's hardware is not a preset bench knows)."""
    if not runtime_spec(config.runtime).simulated:
        return BenchHardware()
    if len(config.models) > 1:  # bench's --models: each preset on GPUs of its own
        models = tuple(
            (m.source or DEFAULT_PRESET_MODEL) + (f":tp{m.tp}" if m.tp else "")
            for m in config.models
        )
        return BenchHardware(gpu=config.gpu, models=models, model_rule=config.selection.rule)
    return BenchHardware(gpu=config.gpu, model=config.model, tp=config.tp, profile=config.profile)


def _whatif(config: ServerConfig, store: Store, flush: Callable[[], Awaitable[None]]) -> WhatIfDesk:
    """The what-if desk: traces under the configured directory, bench on the served
    simulator's hardware (a real engine's: bench's defaults, or a calibration profile)."""
    hardware = bench_hardware(config)
    settings = WhatIfSettings(
        directory=config.whatif_directory,
        keep=config.whatif_keep,
        run_timeout_s=config.whatif_run_timeout_s,
        run_jobs=config.whatif_run_jobs,
    )
    return WhatIfDesk(store.cursor, settings, hardware, flush)


async def _start_runtime(live: Live) -> None:
    try:
        await live.service.runtime.start()
    except Exception as error:
        log.exception("the %s runtime failed to start", live.config.runtime)
        # told to every call (503) and to serve, which stops: waiting helps nobody
        live.service.runtime_failure = f"{type(error).__name__}: {error}"
        live.service.runtime_failed.set()
        return
    live.service.runtime_ready.set()
    # debug: serve prints its own ready line (``announce_ready``), with the model and timing
    log.debug("runtime %s ready", live.config.runtime)


async def _open_live(
    config: ServerConfig, runtime: Runtime | None, extensions: Sequence[Extension]
) -> Live:
    """Open the store (its writer thread starts) and wire the live objects around it: the
    event hub numbered after the store's last event, the service told how to see the store's
    health and where each prompt's block hashes go (redacted as the extensions ask)."""
    store_config = StoreConfig(
        memory_limit=config.store_memory_limit, own_process=config.store_own_process
    )
    store = await asyncio.to_thread(Store.open, config.db_path, store_config)
    try:
        hub = EventHub(first_seq=store.repo.last_seq() + 1)
        live = build_live(config, store, runtime, hub)
    except BaseException:  # e.g. a damaged block met by the wiring's reads
        await asyncio.to_thread(store.close)
        raise
    live.service.store_alive = lambda: store.writer.alive
    live.service.prompt_blocks = PromptBlockRecorder(
        store.prompt_secret, store.writer.put, redaction_from(extensions)
    )
    return live


def _housekeeping_times(config: ServerConfig) -> HousekeepingTimes:
    return HousekeepingTimes(
        program_idle_s=config.program_idle_s,
        pending_tool_s=config.pending_tool_s,
        retain_finished_s=config.retain_finished_s,
        metrics_snapshot_s=config.metrics_snapshot_s,
    )


def _tune_interpreter_for_serving() -> Callable[[], None]:
    """Set the collector and the GIL for a long-lived server; returns what undoes it."""
    # Everything built so far lives as long as the server: take it out of the cyclic
    # collector's generations, so full collections stay short (latency tails).
    gc.collect()
    gc.freeze()
    # A request allocates thousands of short-lived containers (Litestar, pydantic, the
    # call's events); at CPython's default of a young collection every 700 of them,
    # 32 requests in flight promoted their live objects into older generations and the
    # collector took a quarter of the CPU. At 50,000 they die first: 2,250-2,400 ->
    # 2,990-3,250 calls/s (docs/BENCHMARKS.md section 7).
    gc_thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    # The store writer's threads share the GIL with requests. DuckDB takes it back after
    # every task of a statement (a signal check), and when a request holds it, DuckDB
    # forces a switch after this interval; the writer's own Python stretches (Arrow
    # conversion) last well under it. 2 ms against CPython's 5 ms default (which let a
    # batch's conversion hold a request) and 0.5 ms (which let DuckDB interrupt requests
    # four times as often): alternated runs, p99 added median 1.82 -> 1.58 ms.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)

    def untune() -> None:
        gc.set_threshold(*gc_thresholds)
        sys.setswitchinterval(switch_interval)

    return untune


async def _start_serving(
    live: Live, config: ServerConfig, extensions: Sequence[Extension]
) -> Background:
    """Restore what the store remembers, then start the background work and the extensions.
    A failure (a damaged block met by the restore's reads) ends what started and closes the
    store before it propagates: the process may be a test's that goes on, and the store's
    writer threads must not outlive a start that failed."""
    background: Background | None = None
    try:
        await restore_from_store(live)
        record_tenants(live.store, live.keys.tenants)
        times = _housekeeping_times(config)
        background = start_background(live, times, lambda: _start_runtime(live))
        for extension in extensions:
            await extension.start(live)
    except BaseException:
        live.hub.close()
        if background is not None:
            await shut_down(live, background)
        else:
            await asyncio.to_thread(live.store.close)
        raise
    return background


def store_refusal(app: Litestar) -> StoreError | None:
    """The store error that ended ``app``'s start-up (a store that cannot be opened, or a
    damaged block met by the first reads), or None: ``serve`` reports it as one line."""
    refusal: StoreError | None = getattr(app.state, "store_refusal", None)
    return refusal


def create_app(
    config: ServerConfig,
    *,
    runtime: Runtime | None = None,
    extensions: Sequence[Extension] = (),
) -> Litestar:
    """The app. ``runtime`` replaces the one ``config.runtime`` names (tests, benchmarks)."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        try:
            live = await _open_live(config, runtime, extensions)
            app.state.live = live
            background = await _start_serving(live, config, extensions)
        except (StoreOpenError, StoreDamagedError) as error:
            # ``serve`` says this in one line, as it says the refusals it finds before
            # starting (Litestar hands uvicorn the traceback to log: ``store_refusal``)
            app.state.store_refusal = error
            raise
        untune = _tune_interpreter_for_serving()
        try:
            yield
        finally:
            untune()
            live.hub.close()
            for extension in reversed(extensions):
                await extension.stop()
            await shut_down(live, background)

    handlers: list[ControllerRouterHandler] = [
        SystemController,
        ChatController,
        CompletionsController,
        ProgramsController,
        OperatorController,
        WhatIfController,
        ObserveController,
        ModelCompatController,
    ]
    dependencies = dict(DEPENDENCIES)
    for extension in extensions:
        handlers.extend(extension.route_handlers)
        dependencies.update(extension.dependencies())
    app = Litestar(
        route_handlers=handlers,
        dependencies=dependencies,
        lifespan=[lifespan],
        exception_handlers={Exception: handle_error},
        request_class=GuardedRequest,
        # strict bodies: no string or boolean where a number is expected (schemas.py)
        plugins=[PydanticPlugin(validate_strict=True)],
        request_max_body_size=config.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="agentconsole",
            version=API_VERSION,
            path="/schema",
            render_plugins=render_plugins(config.max_tokens_limit),
        ),
        debug=False,
        # serve's own logging stays as ``configure_logging`` set it (level and one format):
        # Litestar's default config would put the root logger back at INFO with a second
        # handler in its own format. Unhandled errors are logged by ``handle_error``.
        logging_config=None,
    )
    fix_options_allow(app)
    if config.express_lane and lane_fits(app, config.max_body_bytes):
        app.asgi_handler = ExpressLane(app, app.asgi_handler, config.max_body_bytes)
    return app
