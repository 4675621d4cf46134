"""``agentconsole serve``: the API server (uvicorn + the Litestar app) and its optional demo
agents and terminal dashboard.

The server holds the DuckDB file exclusively while it runs; ``agentconsole export`` works on
the file once serve has stopped (or, while it runs, ask the server: the store is its alone).

Hooks: ``--demo`` runs ``agentconsole.replay.demo:run_demo(url, keys)`` when the replay
package provides it, else the built-in minimal agents of :mod:`agentconsole.demo`; ``--tui``
runs ``agentconsole.ui.tui.app:run_dashboard(url, key)`` in the foreground (the server then
runs in a background thread and stops when the dashboard quits).

The terminal shows what a user needs: the runtime, model, policies, the admission door,
store, where the browser console and the OpenAI ``base_url`` are, and keys (the banner), the
URL once it listens, and one line when the runtime is ready (or a pointer to the engine log if
it is not). SGLang's own output (its server-args dump, import warnings, its processes' logs)
goes to the engine log next to the store, named in the banner.

What would fail once serving is refused before the banner, with a usage error (exit 2) and no
traceback: a setting no registry knows, ``--tui`` without an operator key, SGLang on a GPU
without a model, a store another process holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import uvicorn
from litestar import Litestar
from litestar.di import Provide
from litestar.types import ControllerRouterHandler
from uvicorn.config import LOGGING_CONFIG
from uvicorn.lifespan.on import LifespanOn, LifespanSendMessage
from uvicorn.logging import TRACE_LOG_LEVEL

from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.runtime import Runtime
from agentconsole.server.api.auth import KeyRing
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.api.connections import HttpLimits, uvicorn_options
from agentconsole.server.api.deps import Live
from agentconsole.server.app import (
    Extension,
    configured_runtime,
    create_app,
    door_settings,
    store_refusal,
)
from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.extension import GatewayExtension
from agentconsole.server.runtime.registry import runtime_spec
from agentconsole.server.store import StoreConfig, StoreOpenError
from agentconsole.server.store.opening import check_openable
from agentconsole.settings import (
    SIM_DEFAULT_MODEL,
    InvalidSettings,
    Settings,
    load_settings_or_explain,
)
from agentconsole.ui.web.routes import console_routes

log = logging.getLogger(__name__)
DemoRunner = Callable[[str, Mapping[str, str]], Awaitable[None]]


def demo_runner() -> DemoRunner:
    """The replay engineer's demo if installed, else the built-in one."""
    try:
        module = importlib.import_module("agentconsole.replay.demo")
        runner: DemoRunner = module.run_demo
        return runner
    except (ImportError, AttributeError):
        from agentconsole.demo import run_demo

        return run_demo


class StartRefused(click.ClickException):
    """``serve`` cannot start as set up (the store is another process's): ``Error: ...`` and
    exit 2, as a usage error, without the usage text."""

    exit_code = 2


#: what uvicorn logs (``uvicorn.error``, at ERROR) once the lifespan's start-up has failed
UVICORN_STARTUP_FAILED = "Application startup failed. Exiting."


class _QuietOnStoreRefusal(logging.Filter):
    """Drops uvicorn's own "startup failed" line when the store refused the start: ``serve``
    says that refusal itself, in one line, and a second one saying only that something failed
    reads as another error."""

    def __init__(self, app: object) -> None:
        super().__init__()
        self._app = app

    def filter(self, record: logging.LogRecord) -> bool:
        refused = isinstance(self._app, Litestar) and store_refusal(self._app) is not None
        return not (refused and record.msg == UVICORN_STARTUP_FAILED)


class StoreRefusalLifespan(LifespanOn):
    """uvicorn's lifespan, less what uvicorn logs of a start-up the store refused (the
    traceback Litestar sends as the failure's message, and uvicorn's "startup failed" line):
    ``serve`` says that refusal in one line once uvicorn has given up (:func:`store_refusal`).
    Any other failure keeps both."""

    async def startup(self) -> None:
        # a filter on uvicorn's logger for the start-up only: the line is logged there, in
        # ``LifespanOn.startup``, with no hook of its own
        quiet = _QuietOnStoreRefusal(self.config.app)
        self.logger.addFilter(quiet)
        try:
            await super().startup()
        finally:
            self.logger.removeFilter(quiet)

    async def send(self, message: LifespanSendMessage) -> None:
        app = self.config.app
        if (
            message["type"] == "lifespan.startup.failed"
            and isinstance(app, Litestar)
            and store_refusal(app) is not None
        ):
            message = {"type": "lifespan.startup.failed", "message": ""}
        await super().send(message)


class ServeConfig(uvicorn.Config):
    """uvicorn's config with :class:`StoreRefusalLifespan` for its lifespan "on"."""

    def load(self) -> None:
        super().load()
        if self.lifespan == "on":
            self.lifespan_class = StoreRefusalLifespan


class Server(uvicorn.Server):
    """uvicorn with two additions: on shutdown the SSE feeds are closed and the calls in flight
    answered first (uvicorn waits for open connections before the app's lifespan ends; each of
    the mounted ``extensions`` is told with its ``shut_down``), and ``on_started`` runs once
    the sockets listen (it receives the base URL)."""

    def __init__(
        self,
        config: uvicorn.Config,
        app: Litestar,
        on_started: Callable[[str], Coroutine[Any, Any, None]] | None = None,
        extensions: Sequence[Extension] = (),
    ) -> None:
        super().__init__(config)
        self.app = app
        self.on_started = on_started
        self.extensions = tuple(extensions)
        self.url = ""
        self._tasks: set[asyncio.Task[None]] = set()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.should_exit or not self.servers:
            return
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        self.url = http_url(host, port)
        click.echo(f"agentconsole serving on {self.url}", err=True)
        if self.config.port == 0:  # the banner could not say where: any free port was taken
            click.echo(address_lines(self.url), err=True)
        if self.on_started is not None:
            task = asyncio.create_task(self.on_started(self.url))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def shutdown(self, sockets: Any = None) -> None:
        live = getattr(self.app.state, "live", None)
        if live is not None:
            # first: requests waiting on a batch the store holds (its disk is full) are
            # answered (503) now, not cancelled with a traceback when uvicorn's grace ends
            live.store.give_up_holds()
            live.hub.close()
            # calls in flight are answered (503) now, before uvicorn waits for connections
            # and then cancels what is left (a bare 500, a stream cut without its end)
            live.service.shut_down()
        for extension in self.extensions:
            extension.shut_down()
        for task in self._tasks:
            task.cancel()
        await super().shutdown(sockets)


def engine_log_path(settings: Settings) -> Path | None:
    """Where an in-process engine's own output goes (SGLang's: next to the store), or None for
    a runtime without one (the simulator, SGLang servers behind a router)."""
    if not runtime_spec(settings.runtime.name).engine_in_process:
        return None
    configured = settings.runtime.extra.get("engine_log")
    return Path(str(configured)) if configured else settings.store.db.with_suffix(".sglang.log")


#: uvicorn's loggers without handlers of their own, reaching the root's (``serve --tui``: the
#: file ``configure_logging`` opened); named, not left unset, so handlers an earlier uvicorn
#: of this process installed (its default config: stderr, stdout) are removed
TO_ROOT_LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {
        name: {"handlers": [], "propagate": True}
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
    },
}


def tui_log_path(settings: Settings) -> Path:
    """Where ``serve --tui`` logs while its dashboard holds the terminal: next to the store."""
    return settings.store.db.with_suffix(".serve.log")


def address_lines(url: str) -> str:
    """Where a browser and an OpenAI client go."""
    return f"console: {url}/  (browser)\nOpenAI base_url: {url}/v1"


def model_line(settings: Settings) -> str:
    """What the runtime serves: a path, its default (SGLang's tiny CPU model), or a simulated
    preset and GPU."""
    runtime = settings.runtime
    spec = runtime_spec(runtime.name)
    if spec.simulated:
        if runtime.profile:
            return f"calibration profile {runtime.profile} (simulated)"
        tp = f" x{runtime.tp}" if runtime.tp > 1 else ""
        return f"{runtime.model or SIM_DEFAULT_MODEL} simulated on {runtime.gpu}{tp}"
    return runtime.model or spec.default_model


def models_line(settings: Settings) -> str | None:
    """Several served models, each with its source (None: one model)."""
    served = settings.served_models()
    if not served:
        return None
    runtime = settings.runtime
    simulated = runtime_spec(runtime.name).simulated
    parts = []
    for entry in served:
        source = entry.path or runtime.model or "the runtime's default"
        if simulated:
            tp = f" x{entry.tp}" if entry.tp and entry.tp > 1 else ""
            source += f" simulated on {entry.gpu or runtime.gpu}{tp}"
        parts.append(f"{entry.name} ({source})")
    return f"models:  {', '.join(parts)}  (default: {served[0].name})"


def http_url(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 address in brackets (``http://::1:8000`` is no URL: the
    banner's addresses, ``--demo``'s agents and ``--tui`` failed on ``--host ::1``)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def door_line(settings: Settings) -> str:
    """Whether new programs may wait at the admission door (on by default), and how long: the
    door the service will run (``door_settings``), under the policy's own flag."""
    door, policy = door_settings(settings.server_config()), settings.runtime.policy
    if not door.enabled:
        return "admission door: off (limits.program_admission = false)"
    if not get_policy(policy).program_aware:
        return f"admission door: off under {policy} (a request-level policy)"
    budget = (
        f"{door.budget_tokens} KV tokens"
        if door.budget_tokens
        else f"{door.memory_share:.0%} of the KV memory"
    )
    return (
        f"admission door: on (a new program waits while the started ones fill {budget}, at"
        f" most {door.wait_s:g} s, then 503; limits.program_admission)"
    )


def banner(settings: Settings) -> str:
    """What ``serve`` prints at start: runtime, model, policies, the admission door, store,
    where the engine logs, where the console and the OpenAI API are, and the API keys: the
    development keys in full (they are public), configured keys only counted (they are
    secrets; the log is not the place for them)."""
    tenants, operators = settings.keys()
    runtime, server = settings.runtime, settings.server
    models = models_line(settings)
    served_as = settings.server_config().model_name
    lines = [
        f"runtime: {runtime.name}  policy: {runtime.policy}  kv-policy: {runtime.kv_policy}",
        models or f"model:   {model_line(settings)}  (served as {served_as})",
        door_line(settings),
        f"store:   {settings.store.db}",
    ]
    if (log_path := engine_log_path(settings)) is not None:
        lines.append(f"engine log: {log_path}")
    if server.port:
        lines.append(address_lines(http_url(server.host, server.port)))
    else:
        lines.append("console (/) and OpenAI base_url (/v1): on the port printed once it listens")
    configured = settings.auth
    for key, tenant in tenants.items():
        if key not in configured.tenant_keys:  # a public development or demo key
            lines.append(f"tenant key:   {key}  (tenant {tenant})")
    lines += [f"operator key: {key}" for key in operators if key not in configured.operator_keys]
    if configured.tenant_keys:
        names = ", ".join(sorted(set(configured.tenant_keys.values())))
        lines.append(f"tenant keys:   {len(configured.tenant_keys)} configured ({names})")
    elif configured.operator_keys:
        live = "only the demo's" if tenants else "none is live"
        lines.append(f"tenant keys:   none configured: {live} (no development key once any is set)")
    if configured.tenant_keys or configured.operator_keys:
        lines.append(f"operator keys: {len(configured.operator_keys)} configured")
        if not operators:
            lines.append("no operator key: the operator routes refuse every call")
    return "\n".join(lines)


class ConsoleExtension:
    """The browser console (``/`` and ``/static/*``): static routes, nothing to start."""

    route_handlers: Sequence[ControllerRouterHandler] = tuple(console_routes())

    def dependencies(self) -> Mapping[str, Provide]:
        return {}

    async def start(self, live: Live) -> None:
        return None

    def shut_down(self) -> None:
        """Nothing to answer: static files are short responses uvicorn lets finish."""

    async def stop(self) -> None:
        return None


def extensions(settings: Settings) -> list[Extension]:
    """The features mounted on the core API: the tool gateway (``/v1/tools*``) and the
    browser console (``/``)."""
    privacy = settings.privacy
    gateway = GatewayConfig(
        redaction=privacy.tool_data,
        tenant_redaction=dict(privacy.tenants),
        sandbox=settings.sandbox.config(),
        tool_bounds=settings.limits.tool_bounds(),
    )
    return [GatewayExtension(gateway), ConsoleExtension()]


async def announce_ready(app: Litestar, since: float, log_path: Path | None) -> bool:
    """Print one line when the runtime is ready: how long it took, the model and its chat
    format; meanwhile, every minute, that it is still starting. False (its error said) when
    the runtime failed to start instead."""
    live: Live = app.state.live
    runtime = live.service.runtime
    where = f" (engine log: {log_path})" if log_path else ""
    settled = (live.service.runtime_ready, live.service.runtime_failed)
    while not any(event.is_set() for event in settled):
        waits = [asyncio.ensure_future(event.wait()) for event in settled]
        try:
            done, _ = await asyncio.wait(waits, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if not done:
            click.echo(f"runtime {runtime.name} still starting{where}", err=True)
    if not live.service.runtime_ready.is_set():
        failure = live.service.runtime_failure
        click.echo(f"runtime {runtime.name} failed to start: {failure}{where}", err=True)
        return False
    settings = getattr(runtime, "settings", None)
    path = getattr(settings, "model_path", None)
    model = live.config.model_name + (f" ({path})" if path else "")
    # a drain left on is replayed at start: up, but /ready stays 503 and calls are refused
    drained = (
        "; drained by an operator: new calls refused (and /ready 503) until "
        "POST /v1/operator/drain ends it"
        if live.service.draining
        else ""
    )
    click.echo(
        f"runtime {runtime.name} ready in {time.monotonic() - since:.1f} s: model {model}, "
        f"chat format {runtime.chat_format.name}{drained}",
        err=True,
    )
    return True


def _stop_if_failed(ready: asyncio.Task[bool], server: Server, failed: list[bool]) -> None:
    """``announce_ready`` found the runtime failed to start: stop serving (every call would
    get 503 for good; serve kept running, saying every minute it was still starting)."""
    if not ready.cancelled() and ready.exception() is None and not ready.result():
        failed.append(True)
        server.should_exit = True


def server_config(settings: Settings) -> ServerConfig:
    """The server's config, with SGLang's output sent to the engine log."""
    config = settings.server_config()
    log_path = engine_log_path(settings)
    if log_path is None:
        return config
    return dataclasses.replace(
        config, runtime_extra={**config.runtime_extra, "engine_log": str(log_path)}
    )


def http_limits(settings: Settings) -> HttpLimits:
    """The HTTP server's limits from the ``server`` settings (``connections.py``)."""
    server = settings.server
    return HttpLimits(
        timeout_keep_alive=server.timeout_keep_alive,
        timeout_headers_s=server.timeout_headers_s,
        timeout_body_s=server.timeout_body_s,
        limit_concurrency=server.limit_concurrency,
        per_tenant_concurrency=server.per_tenant_concurrency,
        unauthenticated_concurrency=server.unauthenticated_concurrency,
        public_concurrency=server.public_concurrency,
        max_header_bytes=server.max_header_bytes,
    )


#: serve's own HTTP clients (the demo's agents, the sglang-router runtime's upstream calls)
#: log each request at INFO through these; the server's access log already shows each one
CLIENT_LOGGERS = ("httpx", "httpcore")


#: serve's one log format: when, how bad, who, what (an error without its time is half told)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level_name: str, log_file: Path | None = None) -> None:
    """Log to stderr (or to ``log_file``, appended: the dashboard holds the terminal) at
    ``level_name``; the in-process HTTP clients' per-request lines only at DEBUG (at INFO a
    demo or a router runtime would print every call twice)."""
    # uvicorn's "trace" sits below DEBUG (logging knows the name only once uvicorn added it)
    name = level_name.upper()
    level = TRACE_LOG_LEVEL if name == "TRACE" else logging.getLevelName(name)
    if log_file is None:
        logging.basicConfig(level=level, stream=sys.stderr, format=LOG_FORMAT)
    else:
        logging.basicConfig(level=level, filename=log_file, format=LOG_FORMAT)
    for logger_name in CLIENT_LOGGERS:
        client_level = level if level <= logging.DEBUG else max(level, logging.WARNING)
        logging.getLogger(logger_name).setLevel(client_level)


def missing_model(settings: Settings) -> str | None:
    """Why the runtime would have no model to load for the one model or an entry given none
    (the runtime's own check: SGLang on a GPU has no default), else None. Asked before
    anything starts: the runtime would raise it in the lifespan, once the banner had promised
    a model."""
    runtime = settings.runtime
    if runtime.model:
        return None
    spec = runtime_spec(runtime.name)
    entries = settings.served_models()
    extras = [entry.extra for entry in entries if not entry.path] if entries else [{}]
    for extra in extras:
        try:
            missing = spec.missing_model({**runtime.extra, **extra})
        except ImportError:  # no torch: the runtime says what is missing once it starts
            return None
        if missing is not None:
            return missing
    return None


def check_store(settings: Settings) -> None:
    """Raise :class:`StartRefused` for a store the server's open would refuse (locked by
    another process, a missing directory, a damaged file or WAL): the same message, said
    before anything starts instead of in a traceback from the lifespan. Reads only, and
    waits for a holder that is exiting as the open does."""
    config = StoreConfig(memory_limit=settings.store.memory_limit.strip())
    try:
        check_openable(settings.store.db, config)
    except StoreOpenError as error:
        raise StartRefused(str(error)) from None


def refuse_as_the_store_did(app: Litestar) -> None:
    """Raise :class:`StartRefused` (one line, exit 2) if ``app``'s start-up ended on a store
    refusal: a damaged block its first reads met, which no check before the start reads."""
    if (refusal := store_refusal(app)) is not None:
        raise StartRefused(str(refusal)) from None


def refuse_to_start(settings: Settings) -> None:
    """What would fail only once serving, refused now: ``click.UsageError`` (exit 2) naming
    what to set, or :class:`StartRefused` for the store."""
    if settings.tui and not settings.keys()[1]:
        raise click.UsageError(
            "--tui needs an operator key, and the configured keys have none: add one"
            """ (auth.operator_keys, AGENTCONSOLE_AUTH__OPERATOR_KEYS='["..."]') or drop --tui"""
        )
    if (missing := missing_model(settings)) is not None:
        raise click.UsageError(missing)
    if (unbuildable := simulated_runtime_refusal(settings)) is not None:
        raise click.UsageError(unbuildable)
    check_store(settings)


def simulated_runtime_refusal(settings: Settings) -> str | None:
    """Why the simulated runtime could not be built for these settings (an unknown model
    preset, GPU or profile, a tp no preset has), else None: building it costs nothing, and
    it would otherwise fail in the lifespan, after the banner promised it. (A real engine's
    model is found, or not, as it loads.)"""
    if not runtime_spec(settings.runtime.name).simulated:
        return None
    try:
        configured_runtime(settings.server_config())
    except (KeyError, ValueError, OSError) as error:
        reason = error.args[0] if isinstance(error, KeyError) and error.args else error
        return f"the simulated runtime cannot serve these settings: {reason}{_tp_hint(settings)}"
    return None


def _tp_hint(settings: Settings) -> str:
    """Where the model is bundled at other tensor-parallel sizes than the one asked, how to
    ask for one (``serve`` has no ``--tp`` flag; a 70B model has no tp-1 profile)."""
    from agentconsole.server.runtime.sim.profile import profile_names

    model, tp = settings.runtime.model, settings.runtime.tp
    sizes = sorted(
        {int(name.rsplit("__tp", 1)[1]) for name in profile_names() if f"__{model}__tp" in name}
    )
    if not sizes or tp in sizes:
        return ""
    listed = ", ".join(str(size) for size in sizes)
    return (
        f" ({model} is bundled at tp {listed}: runtime.tp in --config, or AGENTCONSOLE_RUNTIME__TP)"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Listener:
    """Where and how uvicorn listens for :func:`make_server`."""

    host: str
    port: int  # 0: any free port (the server's ``url`` says which once it listens)
    log_level: str
    limits: HttpLimits
    #: seconds uvicorn waits for open connections to end on stop before cancelling them
    graceful_shutdown_s: int = 5
    #: uvicorn's lines (its access log too) go where ``configure_logging`` sent the log, not
    #: to its own stderr and stdout handlers: ``serve --tui``, whose dashboard holds the terminal
    log_through_root: bool = False


def make_server(
    config: ServerConfig,
    listener: Listener,
    mounted: Sequence[Extension],
    *,
    on_started: Callable[[str], Coroutine[Any, Any, None]] | None = None,
    runtime: Runtime | None = None,
) -> Server:
    """``serve``'s server: the app for ``config`` with the ``mounted`` extensions, under
    uvicorn as ``listener`` says. Built here alone, for ``serve`` and the API tests alike, so
    the app and the server are given the same extensions: those the app starts are those told
    ``shut_down`` when the server begins to stop. ``runtime``: a given one instead of the one
    ``config`` names (tests)."""
    app = create_app(config, runtime=runtime, extensions=mounted)
    uconfig = ServeConfig(
        app,
        host=listener.host,
        port=listener.port,
        log_level=listener.log_level,
        log_config=TO_ROOT_LOGGING if listener.log_through_root else LOGGING_CONFIG,
        # uvicorn builds every request's access line before its logger drops it (~2 us a
        # request): off unless the level shows it
        access_log=listener.log_level.lower() in ("trace", "debug", "info"),
        timeout_graceful_shutdown=listener.graceful_shutdown_s,
        lifespan="on",
        # the app's key ring, rebuilt from the same keys: the request slots attribute each
        # request to its tenant from its head, before the app reads its body
        **uvicorn_options(listener.limits, KeyRing(config.tenant_keys, config.operator_keys)),
    )
    return Server(uconfig, app, on_started, extensions=mounted)


def run_serve(settings: Settings) -> None:
    """Serve until interrupted (or until the dashboard quits with ``tui``); refuses first
    what could not run (:func:`refuse_to_start`)."""
    since = time.monotonic()
    # the dashboard holds the terminal: a log line printed there lands on top of it
    log_file = tui_log_path(settings) if settings.tui else None
    configure_logging(settings.server.log_level, log_file)
    refuse_to_start(settings)
    click.echo(banner(settings), err=True)
    if log_file is not None:
        click.echo(f"log: {log_file} (the dashboard holds this terminal)", err=True)
    tenants, operators = settings.keys()
    log_path = engine_log_path(settings)
    run_demo = demo_runner() if settings.demo else None

    failed: list[bool] = []  # the runtime failed to start: serve stops, exit 1

    async def on_started(url: str) -> None:
        # ``server`` (below) exists by now: this runs once it listens
        # with the dashboard in the foreground the terminal is its own: no lines printed
        ready = (
            None
            if settings.tui
            else asyncio.create_task(announce_ready(server.app, since, log_path))
        )
        if ready is not None:
            ready.add_done_callback(lambda task: _stop_if_failed(task, server, failed))
        try:
            if run_demo is not None:
                await run_demo(url, tenants)
            if ready is not None:
                await ready
        finally:
            if ready is not None:
                ready.cancel()

    listener = Listener(
        settings.server.host,
        settings.server.port,
        settings.server.log_level,
        http_limits(settings),
        log_through_root=log_file is not None,
    )
    server = make_server(
        server_config(settings), listener, extensions(settings), on_started=on_started
    )
    if not settings.tui:
        # uvicorn re-raises the signal that stopped it once it has shut down cleanly
        with contextlib.suppress(KeyboardInterrupt):
            try:
                server.run()
            except SystemExit:  # uvicorn's exit 3: the lifespan's start-up failed
                refuse_as_the_store_did(server.app)
                raise
        if failed:
            raise click.ClickException("the runtime failed to start (its error is above)")
        return
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        thread.join(0.1)
    if server.started:
        dashboard = importlib.import_module("agentconsole.ui.tui.app")
        try:
            dashboard.run_dashboard(server.url, operators[0])
        finally:
            server.should_exit = True
    thread.join()
    # the thread ended by uvicorn's exit (which a thread swallows) if start-up failed
    refuse_as_the_store_did(server.app)


#: ``serve``'s flags (click's parameter names) -> the setting each sets
SERVE_FLAGS: dict[str, str] = {
    "host": "server.host",
    "port": "server.port",
    "log_level": "server.log_level",
    "runtime": "runtime.name",
    "model": "runtime.model",
    "policy": "runtime.policy",
    "kv_policy": "runtime.kv_policy",
    "time_scale": "runtime.time_scale",
    "dp": "runtime.dp",
    "workers": "runtime.workers",
    "router": "runtime.router",
    "db": "store.db",
    "demo": "demo",
    "tui": "tui",
}


def serve_command(config_file: Path | None, options: Mapping[str, object]) -> None:
    """The ``serve`` CLI: flags (None = not given) over env over the config file. Settings
    that cannot be loaded are a usage error (exit 2) naming each bad setting."""
    overrides: dict[str, Any] = {}
    for option, dotted in SERVE_FLAGS.items():
        *sections, name = dotted.split(".")
        target = overrides
        for section in sections:
            target = target.setdefault(section, {})
        target[name] = options.get(option)
    flags = {dotted: "--" + option.replace("_", "-") for option, dotted in SERVE_FLAGS.items()}
    try:
        settings = load_settings_or_explain(config_file, overrides, flags)
    except InvalidSettings as error:
        raise click.UsageError(str(error)) from None
    run_serve(settings)
