"""The SGLang runtime: ``agentconsole.scheduler.runtime.Runtime`` around an in-process
``sglang.Engine`` (0.5.23), with the program-aware plugin in its scheduler process.

Identity and ordering: each call is sent as a ``GenerateReqInput`` with ``rid = call_id``
(``program/node/attempt``), the ticket in ``sampling_params.custom_params`` (``wire``), a
bounded static ``priority`` (the boost) and ``cache_salt`` = the tenant's namespace, so no
prefix is shared across tenants (a wholly public prompt uses the shared ``public`` salt).
The plugin orders SGLang's waiting queue by the same policy key and fairness guard as the
simulator; live control (``live_control``) reaches it through ``control.json``.

Abort goes by exact rid through the tokenizer manager (SGLang ignores unknown or prefix rids
and does not abort when a task is cancelled, so every rid is tracked here) and returns once
the engine sent the request's final chunk. The engine is started in a worker thread (the
server's loop keeps answering) with its processes and signal handling kept in bounds by
``processes``; ``stop`` ends only the engine's own processes. A request SGLang refuses as
malformed before queueing it (``ValueError`` from ``generate_request``) ends as its own 400
abort of a call does (:func:`refuse`), not as a failure of the engine.

Data parallelism (``EngineSettings.dp > 1``, ``dataparallel``): SGLang runs ``dp_size`` ranks;
each program call is placed on a rank by the KV-aware router score and sent with
``routed_dp_rank``; the plugin's per-rank reports are merged (``rank_status``).

Telemetry (``telemetry``): per-call ``call.scheduled`` and ``kv.*`` events, evictions and
engine stats go to ``options.extra["event_sink"]``; ``kvview`` answers ``memory``,
``context_of`` and ``probe`` and says where SGLang's own Prometheus files are.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from agentconsole.scheduler.events import EventSink
from agentconsole.scheduler.policies import DEFAULT_POLICY, get_policy
from agentconsole.scheduler.runtime import (
    ChatFormat,
    GenerationRequest,
    RuntimeSnapshot,
    ServicePrior,
)
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.live.chatformat import ChatMLFormat
from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sglang import engine_config, processes, retention, symbols, wire
from agentconsole.server.runtime.sglang.chat_template import build_format
from agentconsole.server.runtime.sglang.contexts import ProgramContexts
from agentconsole.server.runtime.sglang.control import ControlState, ControlWriter, marker_files
from agentconsole.server.runtime.sglang.dataparallel import RankRouting
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.engine_log import EngineLog
from agentconsole.server.runtime.sglang.factory import default_model_dir, settings_from_options
from agentconsole.server.runtime.sglang.kvview import KVView
from agentconsole.server.runtime.sglang.lastcalls import LastCalls
from agentconsole.server.runtime.sglang.live_control import LiveControl
from agentconsole.server.runtime.sglang.rank_status import RankFiles, clear_reports
from agentconsole.server.runtime.sglang.ranks import RankRouter
from agentconsole.server.runtime.sglang.snapshot import build_snapshot
from agentconsole.server.runtime.sglang.stream import SGLangStream
from agentconsole.server.runtime.sglang.telemetry import Telemetry
from agentconsole.server.runtime.sglang.tool_choice import ServedFormat

logger = logging.getLogger("agentconsole.sglang")
_HEALTH_FRESH_S = 5.0
#: how long an abort waits for SGLang to register the call (it drops an abort for a rid it
#: does not know yet); then it goes in the background, as soon as the rid is there
ABORT_WAIT_S = 30.0
_METRICS_IN_PROCESS = False  # an engine with SGLang's metrics was started in this process


class SGLangRuntime(LiveControl, KVView, RankRouting):
    """See the module docstring. Create with :func:`create_runtime` or directly."""

    name = "sglang"

    def __init__(
        self,
        settings: EngineSettings,
        *,
        policy: str = DEFAULT_POLICY,
        state_dir: Path | None = None,
        control: ControlState | None = None,
        clock: Any = time.time,
        event_sink: EventSink | None = None,
    ) -> None:
        get_policy(policy)  # KeyError for an unknown name, before anything starts
        self.settings = settings
        self.policy_name = policy
        self.clock = clock
        self._own_state_dir = state_dir is None
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="agentconsole-sglang-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        clear_reports(self.state_dir, settings.dp)  # a configured folder outlives an engine
        initial = control or ControlState()
        initial.policy = policy
        self.control = ControlWriter(self.state_dir, initial)
        self.engine: Any = None
        self._procs: processes.EngineProcesses | None = None
        self._calls: dict[str, SGLangStream] = {}
        # the plugin's reports, one set per data-parallel rank (merged for the server)
        self.rank_files = RankFiles(self.state_dir, settings.dp)
        pinned = settings.dp > 1 and settings.pin_ranks
        self.router = RankRouter(settings.dp) if pinned else None
        self.telemetry = Telemetry(
            event_sink, self.read_status, ProgramContexts(), read_ranks=self.rank_files.statuses
        )
        self._gate = asyncio.Event()
        self._gate.set()
        #: aborts still waiting for SGLang to register their call (see ``abort``)
        self._late_aborts: set[asyncio.Task[object]] = set()
        self._started_at = 0.0
        self._last_output = 0.0
        self._hit_tokens = 0
        self._last_calls = LastCalls()
        self._retention_seq = 0
        self._probe_at = 0.0
        self._probe_ok = False
        self._log = EngineLog(settings.log_file)  # SGLang's own output (None: the terminal)
        #: why the engine is down (an engine process gone: ``processes.watch``); None while up
        self._down: str | None = None
        self._watch: asyncio.Task[None] | None = None
        self._format: ServedFormat | None = None  # the model's chat format, once it is up

    @property
    def chat_format(self) -> ChatFormat:
        """The model's chat template and tool-call parser (``chat_template``); before the
        engine is up, ChatML with estimated sizes."""
        return self._format if self._format is not None else ChatMLFormat()

    @property
    def max_context_tokens(self) -> int | None:
        """The engine's context length (prompt plus output: its tokenizer manager's
        ``context_len``, from the model config or ``--context-length``); None until it is up."""
        manager = getattr(self.engine, "tokenizer_manager", None)
        limit = getattr(manager, "context_len", None)
        return limit if isinstance(limit, int) else None

    @property
    def vocab_size(self) -> int | None:
        """The model config's vocabulary size (the bound SGLang checks ``logit_bias`` against,
        but only once the call is queued, and its refusal reads as an engine failure); None
        until the engine is up."""
        manager = getattr(self.engine, "tokenizer_manager", None)
        size = getattr(getattr(manager, "model_config", None), "vocab_size", None)
        return size if isinstance(size, int) and size > 0 else None

    def service_prior(self) -> ServicePrior | None:
        """None: a real engine's speed is learned from the calls it serves."""
        return None

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the engine (in a worker thread, so the server's loop keeps answering); with
        the plugin, return once it reported from the scheduler (``RuntimeError`` if it never
        does: SGLang only logs plugin failures)."""
        if self.engine is not None:
            return
        if self.settings.is_cpu:
            os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
        if self.settings.plugin:
            await asyncio.to_thread(self._log.run, retention.install_strategy)  # in this process
        global _METRICS_IN_PROCESS
        if self.settings.enable_metrics and _METRICS_IN_PROCESS:
            # SGLang registers its tokenizer-side metrics in the process-wide Prometheus
            # registry: a second engine with metrics in one process fails at start
            logger.warning("SGLang metrics already registered in this process: disabled")
            self.settings = dataclasses.replace(self.settings, enable_metrics=False)
        _METRICS_IN_PROCESS |= self.settings.enable_metrics
        kwargs = engine_config.engine_kwargs(self.settings)
        env = engine_config.engine_env(self.settings, self.state_dir)
        if self.settings.enable_metrics:
            # SGLang's processes write Prometheus files there, the tokenizer manager in this
            # process lazily too; SGLang would reuse (and on the next start delete) the folder
            # of an earlier engine, so each engine gets its own; the variable stays set while
            # the engine runs and is removed when it stops (a process started later must not
            # inherit a folder that is gone: prometheus_client would fail at its first metric)
            metrics_dir = self.state_dir / "prometheus"
            metrics_dir.mkdir(exist_ok=True)
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        previous_sigterm = signal.getsignal(signal.SIGTERM)
        self.engine = await asyncio.to_thread(self._log.run, self._construct, kwargs, env)
        tm = self.engine.tokenizer_manager
        try:
            parser = self.settings.tool_call_parser
            self._format = await asyncio.to_thread(build_format, tm.tokenizer, parser)
        except BaseException:
            await self.stop()
            raise
        tm.auto_create_handle_loop()
        processes.reclaim_signals(previous_sigterm)
        self._started_at = time.time()
        if self.settings.plugin:
            # each scheduler's first loop pass writes its status (read_status: every rank's)
            deadline = time.monotonic() + 10.0 * self.settings.dp
            while self.read_status() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            markers = marker_files(self.state_dir)
            if len(markers) < self.settings.dp or self.read_status() is None:
                await self.stop()
                raise RuntimeError(
                    "the agentconsole plugin is not active in SGLang's scheduler (no marker or "
                    f"status in {self.state_dir}); see the engine log for 'Failed to load plugin'"
                )
        self.telemetry.start()
        if self._procs is not None:
            watching = processes.watch(self._procs, self._started_at, self._engine_down)
            self._watch = asyncio.create_task(watching, name="sglang:watch")

    def _engine_down(self, reason: str) -> None:
        """An engine process is gone: fail every call in flight now (each caller gets its 503
        and its program's cancel returns) and every later one at once (``_pump``)."""
        self._down = reason
        logger.error(reason)
        for call in list(self._calls.values()):
            task = call.task
            self._settle(call, processes.EngineDown(reason))
            if task is not None:
                task.cancel()

    def _construct(self, kwargs: dict[str, Any], env: dict[str, str | None]) -> Any:
        engine_cls = symbols.load(symbols.ENGINE)
        previous = engine_config.apply_env(env)
        try:
            with processes.launching() as launch:
                engine = engine_cls(**kwargs)
        except BaseException:
            processes.EngineProcesses(launch.children).stop()  # what it started, nothing else
            raise
        finally:
            engine_config.apply_env(previous)
        self._procs = processes.EngineProcesses(launch.children)
        return engine

    async def stop(self) -> None:
        """End every call with ``abort``, then stop the engine's processes (only those)."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        await self.telemetry.stop()
        for late in list(self._late_aborts):  # the engine goes: nothing left to abort
            late.cancel()
        calls = list(self._calls.values())
        for call in calls:
            call.begin_abort()
            if call.task is not None:
                call.task.cancel()
        await asyncio.gather(*(c.task for c in calls if c.task is not None), return_exceptions=True)
        for call in calls:
            call.finish()
        self._calls.clear()
        engine, self.engine = self.engine, None
        if engine is not None:
            tm = engine.tokenizer_manager
            watchdog = getattr(tm, "_subprocess_watchdog", None)
            if watchdog is not None:
                watchdog.stop()
            for task in list(getattr(tm, "asyncio_tasks", ())):
                task.cancel()
            _close_zmq(engine, tm)
        if self._procs is not None:
            await asyncio.to_thread(self._procs.stop)
            self._procs = None
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR") == str(self.state_dir / "prometheus"):
            del os.environ["PROMETHEUS_MULTIPROC_DIR"]
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        self._log.close()

    # -- calls -------------------------------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> SGLangStream:
        """Send a call to the engine (its one task streams it); ``ValueError`` if its id is in
        flight."""
        if self.engine is None:
            raise RuntimeError("the SGLang runtime is not started")
        call = self._new_call(request)
        self._place(call)  # its data-parallel rank, before it counts as load
        self._launch(call, self._pump(call), "sglang")
        return call

    def _request(
        self, request: GenerationRequest, kind: wire.CallKind, rank: int | None = None
    ) -> Any:
        ticket = request.ticket
        offset = self.clock() - time.time()
        sampling = wire.sampling_params(request, clock_offset=offset, kind=kind)
        salt = wire.request_salt(request)
        req_cls = symbols.load(symbols.GENERATE_REQ)
        # ids the server tokenized go as they are (SGLang skips tokenizing); SGLang returns
        # the prompt ids it used either way (telemetry: recomputed tokens, probe)
        prompt: dict[str, Any] = (
            {"input_ids": list(request.prompt_ids)}
            if request.prompt_ids is not None
            else {"text": request.prompt}
        )
        if rank is not None:  # data parallelism: the rank holding the program's KV
            prompt["routed_dp_rank"] = rank
        return req_cls(
            **prompt,
            return_prompt_token_ids=True,
            sampling_params=sampling,
            rid=ticket.call_id,
            priority=wire.static_priority(ticket),
            cache_salt=salt,
            stream=True,
        )

    async def _pump(self, call: SGLangStream, kind: wire.CallKind = wire.CallKind.CALL) -> None:
        error: BaseException | None = None
        try:
            if self._down is not None:
                raise processes.EngineDown(self._down)
            await self._gate.wait()
            if call.aborting:
                return
            obj = self._request(call.request, kind, call.rank)
            streamed = False
            try:
                async for chunk in self.engine.tokenizer_manager.generate_request(obj, None):
                    streamed = True
                    # telemetry first: its call.scheduled precedes the reader's
                    # call.first_token, which feeding the chunk emits (the reader listens in
                    # this task)
                    self.telemetry.on_chunk(call, chunk)
                    call.feed(chunk)
                    self._served_on(call, call.meta)
                    self._last_output = time.time()
            except ValueError as refused:
                if streamed:
                    raise
                refuse(call, refused)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            error = err
        finally:
            self._settle(call, error)

    async def abort(self, call_id: str) -> bool:
        """Abort by exact id; returns True once the engine sent the call's final chunk (no
        token is delivered after this is called), False for an unknown or ended call."""
        call = self._calls.get(call_id)
        if call is None or call.ended:
            return False
        call.begin_abort()
        tm = self.engine.tokenizer_manager
        deadline = time.monotonic() + ABORT_WAIT_S
        # SGLang drops an abort for a rid it has not registered yet (still tokenizing)
        while call_id not in tm.rid_to_state and not call.ended:
            if call.task is not None and not self._gate.is_set():
                call.task.cancel()  # held by the adapter's drain gate: never reached SGLang
                with contextlib.suppress(asyncio.CancelledError):
                    await call.task
                # settled here too: a task cancelled before its first step never ran its own
                # ``finally`` (the call stayed in the books); settling twice does nothing
                self._settle(call, None)
                return True
            if time.monotonic() > deadline:
                # the caller stops waiting; the abort still goes once SGLang has the rid
                logger.warning("call %s not in the engine after %.0f s", call_id, ABORT_WAIT_S)
                self._late(self._abort_when_registered(call_id))
                return False
            await asyncio.sleep(0.002)
        if not call.ended:
            tm.abort_request(call_id)
        with contextlib.suppress(Exception):
            await call.result()
        return True

    def _abort_later(self, call_id: str) -> None:
        """Abort ``call_id`` in the background (the caller cannot wait)."""
        self._late(self.abort(call_id))

    def _late(self, work: Coroutine[Any, Any, object]) -> None:
        """Run ``work`` as a task cancelled when the engine stops (``_late_aborts``)."""
        task = asyncio.create_task(work)
        self._late_aborts.add(task)
        task.add_done_callback(self._late_aborts.discard)

    async def _abort_when_registered(self, call_id: str) -> None:
        """Abort ``call_id`` as soon as SGLang has registered it (or it ended)."""
        tm = self.engine.tokenizer_manager
        call = self._calls.get(call_id)
        while call is not None and not call.ended:
            if call_id in tm.rid_to_state:
                tm.abort_request(call_id)
                return
            await asyncio.sleep(0.05)

    async def flush_cache(self) -> bool:
        """Empty SGLang's radix cache; SGLang refuses (False) unless the engine is idle."""
        out = await self.engine.tokenizer_manager.flush_cache()
        return bool(getattr(out, "success", False))

    async def healthy(self) -> bool:
        """Engine processes alive, no failure signalled, and the engine produced output in the
        last few seconds or answers a one-token probe (ranked first by the plugin) now."""
        if self.engine is None or self._procs is None or not self._procs.alive():
            return False
        if processes.sigquit_seen(self._started_at):
            return False
        now = time.time()
        if now - self._last_output < _HEALTH_FRESH_S:
            return True
        if self.control.state.paused or not self._gate.is_set():
            # a drain admits no new call, a probe included (it would wait in the queue until
            # the resume): the processes' health is the engine's
            return True
        if now - self._probe_at < 1.0:
            return self._probe_ok
        self._probe_at = now
        self._probe_ok = await self._probe()
        return self._probe_ok

    async def _probe(self) -> bool:
        rid = f"__probe__/{time.time_ns()}/1"
        ticket = CallTicket(rid, "__probe__", "probe", "__probe__", arrival=self.clock())
        call = SGLangStream(GenerationRequest(ticket, "ok", max_tokens=1))
        self._calls[rid] = call
        call.task = asyncio.create_task(self._pump(call, wire.CallKind.PROBE))
        try:
            result = await asyncio.wait_for(call.result(), timeout=10.0)
        except asyncio.CancelledError:
            # the caller stopped waiting (``/ready``'s own bound): the probe must not stay
            # in the engine's queue, one more for each later probe
            self._abort_later(rid)
            raise
        except Exception:
            await self.abort(rid)
            return False
        return result.output_tokens >= 1

    # -- observation ---------------------------------------------------------------------------
    def snapshot(self) -> RuntimeSnapshot:
        """Queue in policy order, running batch and KV use, from the plugin's status file and
        the adapter's own calls (non-blocking: reads a small file at most)."""
        snap = build_snapshot(
            self.name,
            self.policy_name,
            self.read_status(),
            list(self._calls.values()),
            hit_tokens=self._hit_tokens,
            paused=self.control.state.paused or not self._gate.is_set(),
            placement=self.read_placement(),
        )
        snap.tiers.update(self.rank_tiers())  # data parallelism: each rank's KV too
        return snap


def create_runtime(options: RuntimeOptions) -> SGLangRuntime:
    """The runtime registry's factory (``serve --runtime sglang``); not started yet."""
    settings = settings_from_options(options)
    state_dir = options.extra.get("state_dir")
    control = ControlState.from_options(options.extra)
    return SGLangRuntime(
        settings,
        policy=options.policy,
        state_dir=Path(str(state_dir)) if state_dir else None,
        control=control,
        event_sink=options.extra.get("event_sink"),
    )


__all__ = ["SGLangRuntime", "create_runtime", "default_model_dir"]


def refuse(call: SGLangStream, refused: ValueError) -> None:
    """End ``call`` as SGLang's own 400 abort of it: SGLang 0.5.23's tokenizer manager raises
    ``ValueError`` from ``generate_request`` for a request it finds malformed before it is
    queued (``SamplingParams.verify``/``normalize``, its length and field checks), the very
    refusal it streams as an abort with status 400 once queued, and its own HTTP server answers
    400 with that message. So the call ends refused with SGLang's message (the client's 400,
    never retried; its node's attempt fails, the program goes on), not failed (a 503 to retry,
    which would be refused alike)."""
    message = str(refused) or type(refused).__name__
    call.meta = {"finish_reason": {"type": "abort", "status_code": 400, "message": message}}


def _close_zmq(*owners: object) -> None:
    """Close the ZMQ contexts of the engine's sockets now, dropping unsent messages: left to
    the garbage collector, a context whose socket still holds a message blocks its finaliser
    forever (a process that started an engine then never exited)."""
    import zmq

    contexts = {
        value.context
        for owner in owners
        for value in vars(owner).values()
        if isinstance(value, zmq.Socket)
    }
    for context in contexts:
        context.destroy(linger=0)
