"""The SGLang runtime: ``agentconsole.scheduler.runtime.Runtime`` around an in-process
``sglang.Engine`` (0.5.23), with the program-aware plugin in its scheduler process.

Identity and ordering: each call is sent as a ``GenerateReqInput`` with ``rid = call_id``
(``program/node/attempt``), the ticket in ``sampling_params.custom_params`` (``wire``), a
bounded static ``priority`` (the boost) and ``cache_salt`` = the tenant's namespace, so no
prefix is shared across tenants (a wholly public prompt uses the shared ``public`` salt).
The plugin orders SGLang's waiting queue by the same policy key and fairness guard as the
simulator. Live control (policy, drain, boost, re-prioritise, preempt, tool-wait retention)
reaches the scheduler through ``control.json`` (see ``control``); the adapter waits for the
plugin's acknowledgement in ``status.json`` where the order of effects matters.

Abort goes by exact rid through the tokenizer manager (SGLang ignores unknown or prefix rids
and does not abort when a task is cancelled, so every rid is tracked here) and returns once
the engine sent the request's final chunk. Operator preempt: SGLang has no per-request
preempt, so the plugin first demotes the call (``control.preempted``), then the adapter asks
SGLang to retract the running batch (``pause_generation(mode="retract")`` + continue): every
running call is requeued with its KV kept in the radix cache, and the plugin re-admits all but
the demoted one at once (they keep their better keys). Drain (``pause``) is the plugin's
admission gate: running calls continue, queued ones wait (SGLang's own pause would freeze
running calls too). Without the plugin (stock baselines) drain holds new calls in the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.runtime import (
    CacheAction,
    GenerationRequest,
    RuntimeSnapshot,
)
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sglang import engine_config, processes, retention, symbols, wire
from agentconsole.server.runtime.sglang.control import (
    STATUS_FILE,
    CachedJsonFile,
    ControlState,
    ControlWriter,
    RetentionHint,
    marker_files,
)
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.snapshot import build_snapshot
from agentconsole.server.runtime.sglang.status import SchedulerStatus
from agentconsole.server.runtime.sglang.stream import LiveCall, SGLangStream

_ACK_TIMEOUT_S = 3.0
_HEALTH_FRESH_S = 5.0


class SGLangRuntime:
    """See the module docstring. Create with :func:`create_runtime` or directly."""

    name = "sglang"

    def __init__(
        self,
        settings: EngineSettings,
        *,
        policy: str = "cp-cache",
        state_dir: Path | None = None,
        control: ControlState | None = None,
        clock: Any = time.time,
    ) -> None:
        get_policy(policy)  # KeyError for an unknown name, before anything starts
        self.settings = settings
        self.policy_name = policy
        self.clock = clock
        self._own_state_dir = state_dir is None
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="agentconsole-sglang-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        initial = control or ControlState()
        initial.policy = policy
        self.control = ControlWriter(self.state_dir, initial)
        self.engine: Any = None
        self._procs: processes.EngineProcesses | None = None
        self._calls: dict[str, LiveCall] = {}
        self._status = CachedJsonFile(self.state_dir / STATUS_FILE, min_interval_s=0.0)
        self._gate = asyncio.Event()
        self._gate.set()
        self._started_at = 0.0
        self._last_output = 0.0
        self._hit_tokens = 0
        self._retention_seq = 0
        self._probe_at = 0.0
        self._probe_ok = False

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the engine (in a worker thread, so the server's loop keeps answering) and
        check the plugin is active in the scheduler. Raises ``RuntimeError`` if it is not."""
        if self.engine is not None:
            return
        if self.settings.is_cpu:
            os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
        if self.settings.plugin:
            await asyncio.to_thread(retention.install_strategy)  # the choice, in this process
        kwargs = engine_config.engine_kwargs(self.settings)
        env = engine_config.engine_env(self.settings, self.state_dir)
        previous_sigterm = signal.getsignal(signal.SIGTERM)
        self.engine = await asyncio.to_thread(self._construct, kwargs, env)
        tm = self.engine.tokenizer_manager
        tm.auto_create_handle_loop()
        processes.reclaim_signals(previous_sigterm)
        self._started_at = time.time()
        if self.settings.plugin and not marker_files(self.state_dir):
            await self.stop()
            raise RuntimeError(
                "the agentconsole plugin is not active in SGLang's scheduler "
                f"(no marker in {self.state_dir}); see the engine log for 'Failed to load plugin'"
            )

    def _construct(self, kwargs: dict[str, Any], env: dict[str, str | None]) -> Any:
        engine_cls = symbols.load(symbols.ENGINE)
        previous = engine_config.apply_env(env)
        try:
            with processes.launching() as launch:
                try:
                    engine = engine_cls(**kwargs)
                except BaseException:
                    processes.EngineProcesses(launch.children).stop()
                    raise
        finally:
            engine_config.apply_env(previous)
        self._procs = processes.EngineProcesses(launch.children)
        return engine

    async def stop(self) -> None:
        """End every call with ``abort``, then stop the engine's processes (only those)."""
        for call in list(self._calls.values()):
            call.begin_abort()
            if call.task is not None:
                call.task.cancel()
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
        if self._procs is not None:
            await asyncio.to_thread(self._procs.stop)
            self._procs = None
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # -- calls -------------------------------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> SGLangStream:
        """Send a call to the engine (a task streams it); ``ValueError`` if its id is in flight."""
        if self.engine is None:
            raise RuntimeError("the SGLang runtime is not started")
        rid = request.ticket.call_id
        if rid in self._calls:
            raise ValueError(f"call {rid!r} is already in flight")
        call = LiveCall(request)
        self._calls[rid] = call
        call.task = asyncio.create_task(self._pump(call), name=f"sglang:{rid}")
        return SGLangStream(call)

    def _request(self, request: GenerationRequest, kind: wire.CallKind) -> Any:
        ticket = request.ticket
        sampling: dict[str, Any] = {
            "max_new_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "custom_params": wire.encode(
                ticket, clock_offset=self.clock() - time.time(), kind=kind
            ),
        }
        if request.stop:
            sampling["stop"] = list(request.stop)
        if request.forced_output_tokens is not None:  # benchmarks: exact output lengths
            sampling["max_new_tokens"] = max(1, request.forced_output_tokens)
            sampling["ignore_eos"] = True
        salt = wire.cache_salt(
            request.cache_namespace,
            prompt_chars=len(request.prompt),
            public_prefix_chars=request.public_prefix_chars,
        )
        req_cls = symbols.load(symbols.GENERATE_REQ)
        return req_cls(
            text=request.prompt,
            sampling_params=sampling,
            rid=ticket.call_id,
            priority=wire.static_priority(ticket),
            cache_salt=salt,
            stream=True,
        )

    async def _pump(self, call: LiveCall, kind: wire.CallKind = wire.CallKind.CALL) -> None:
        error: BaseException | None = None
        try:
            await self._gate.wait()
            if call.aborting:
                return
            obj = self._request(call.request, kind)
            async for chunk in self.engine.tokenizer_manager.generate_request(obj, None):
                call.feed(chunk)
                self._last_output = time.time()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            error = err
        finally:
            if self._calls.get(call.rid) is call:
                del self._calls[call.rid]
            self._hit_tokens += int(call.meta.get("cached_tokens") or 0)
            call.finish(error)
            self._forget_control(call.rid)

    async def abort(self, call_id: str) -> bool:
        """Abort by exact id; returns True once the engine sent the call's final chunk (no
        token is delivered after this is called), False for an unknown or ended call."""
        call = self._calls.get(call_id)
        if call is None or call.done.done():
            return False
        call.begin_abort()
        tm = self.engine.tokenizer_manager
        deadline = time.monotonic() + 30.0
        # SGLang drops an abort for a rid it has not registered yet (still tokenizing)
        while call_id not in tm.rid_to_state and not call.done.done():
            if call.task is not None and not self._gate.is_set():
                call.task.cancel()  # held by the adapter's drain gate: never reached SGLang
                with contextlib.suppress(asyncio.CancelledError):
                    await call.task
                call.finish()
                return True
            if time.monotonic() > deadline:
                raise TimeoutError(f"call {call_id!r} never reached the engine")
            await asyncio.sleep(0.002)
        if not call.done.done():
            tm.abort_request(call_id)
        with contextlib.suppress(Exception):
            await asyncio.shield(call.done)
        return True

    async def reprioritise(self, call_id: str, ticket: CallTicket) -> bool:
        """Re-rank a call in the engine under ``ticket`` (applied at the scheduler's next
        ordering pass); False for an unknown or ended call."""
        if call_id not in self._calls:
            return False
        self.control.state.tickets[call_id] = ticket.to_params()
        self.control.write()
        return True

    async def boost(self, program_id: str, amount: float) -> None:
        """Operator boost: the program's calls already in the engine are re-ranked with
        ``amount`` as their boost (later tickets carry it from the controller)."""
        self.control.state.boosts[program_id] = amount
        await self._ack(self.control.write())

    async def preempt(self, call_id: str) -> bool:
        """Take a running call off the engine and requeue it behind the others (see the module
        docstring for the mechanism). False when the call is not running."""
        call = self._calls.get(call_id)
        status = self.read_status()
        running = status is not None and any(r.rid == call_id for r in status.running)
        if call is None or call.done.done() or not (running or call.first_at is not None):
            return False
        if not self.settings.plugin:
            return False
        self.control.state.preempted[call_id] = time.time()
        await self._ack(self.control.write())
        tm = self.engine.tokenizer_manager
        await tm.pause_generation(symbols.load(symbols.PAUSE_REQ)(mode="retract"))
        await tm.continue_generation(symbols.load(symbols.CONTINUE_REQ)(torch_empty_cache=False))
        return True

    async def cache_hint(self, program_id: str, action: CacheAction, retain_s: float) -> None:
        """Apply a tool-wait decision to the program's last context in SGLang's radix tree
        (``keep``: evicted last until ``retain_s`` from now; ``drop``/``offload``: evicted
        first). Returns once the scheduler applied it; a no-op without the plugin."""
        if not self.settings.plugin:
            return
        now = time.time()
        self._retention_seq += 1
        state = self.control.state
        state.retention[program_id] = RetentionHint(
            action.value, now + retain_s, self._retention_seq
        )
        for pid in [p for p, h in state.retention.items() if h.until < now - 60.0]:
            del state.retention[pid]
        await self._ack(self.control.write())

    def set_policy(self, name: str) -> None:
        """Switch the ordering policy (``KeyError`` for an unknown name); the scheduler applies
        it at its next ordering pass."""
        get_policy(name)
        if name != self.control.state.policy:
            self.policy_name = name
            self.control.state.policy = name
            self.control.write()

    async def pause(self) -> None:
        """Drain: admit nothing new; running calls continue. Returns once the scheduler
        acknowledged (with the plugin)."""
        if self.settings.plugin:
            if not self.control.state.paused:
                self.control.state.paused = True
                await self._ack(self.control.write())
        else:
            self._gate.clear()

    async def resume(self) -> None:
        """End a drain: queued calls are admitted again."""
        if self.settings.plugin and self.control.state.paused:
            self.control.state.paused = False
            await self._ack(self.control.write())
        self._gate.set()

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
        if now - self._probe_at < 1.0:
            return self._probe_ok
        self._probe_at = now
        self._probe_ok = await self._probe()
        return self._probe_ok

    async def _probe(self) -> bool:
        rid = f"__probe__/{time.time_ns()}/1"
        ticket = CallTicket(rid, "__probe__", "probe", "__probe__", arrival=self.clock())
        call = LiveCall(GenerationRequest(ticket, "ok", max_tokens=1))
        self._calls[rid] = call
        call.task = asyncio.create_task(self._pump(call, wire.CallKind.PROBE))
        try:
            result = await asyncio.wait_for(asyncio.shield(call.done), timeout=10.0)
        except Exception:
            await self.abort(rid)
            return False
        return result.output_tokens >= 1

    # -- observation ---------------------------------------------------------------------------
    def read_status(self) -> SchedulerStatus | None:
        """The plugin's latest ``status.json`` (None without the plugin or before the first)."""
        data, _ = self._status.poll(time.monotonic())
        if data is None:
            return None
        try:
            return SchedulerStatus.from_json(data)
        except (TypeError, ValueError):
            return None

    def snapshot(self) -> RuntimeSnapshot:
        """Queue in policy order, running batch and KV use, from the plugin's status file and
        the adapter's own calls (non-blocking: reads a small file at most)."""
        return build_snapshot(
            self.name,
            self.policy_name,
            self.read_status(),
            list(self._calls.values()),
            hit_tokens=self._hit_tokens,
            paused=self.control.state.paused or not self._gate.is_set(),
        )

    # -- helpers -------------------------------------------------------------------------------
    async def _ack(self, version: int) -> bool:
        """Wait until the plugin applied control ``version`` (True) or a timeout (False).

        Returns at once when no call of ours is in the engine: an idle scheduler sleeps on its
        sockets (up to 1 s) but re-reads the control file before it orders the next request,
        so the change is in force before it matters."""
        if not self.settings.plugin or self.engine is None or not self._calls:
            return False
        deadline = time.monotonic() + _ACK_TIMEOUT_S
        while time.monotonic() < deadline:
            status = self.read_status()
            if status is not None and status.control_version >= version:
                return True
            await asyncio.sleep(0.005)
        return False

    def _forget_control(self, rid: str) -> None:
        state = self.control.state
        if rid in state.tickets or rid in state.preempted:
            state.tickets.pop(rid, None)
            state.preempted.pop(rid, None)
            self.control.write()


def default_model_dir(options: RuntimeOptions) -> Path:
    """Where the tiny CPU model lives: ``extra["model_cache_dir"]``, else
    ``$AGENTCONSOLE_MODEL_CACHE``, else ``~/.cache/agentconsole/tiny-llama``."""
    explicit = options.extra.get("model_cache_dir") or os.environ.get("AGENTCONSOLE_MODEL_CACHE")
    if explicit:
        return Path(str(explicit))
    return Path.home() / ".cache" / "agentconsole" / "tiny-llama"


def settings_from_options(options: RuntimeOptions) -> EngineSettings:
    """Engine settings for ``options``: a CUDA GPU when torch sees one, else the CPU engine;
    with no model on a CPU machine, the tiny model (made once, in the cache folder)."""
    extra = options.extra
    device = str(extra.get("device") or _default_device())
    if options.model:
        model = Path(options.model)
    elif device == "cpu":
        from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

        model = make_tiny_model(default_model_dir(options))
    else:
        raise ValueError("the SGLang runtime on a GPU needs a model (RuntimeOptions.model)")
    return EngineSettings(
        model_path=model,
        device=device,
        plugin=bool(extra.get("plugin", True)),
        schedule_policy=str(extra.get("schedule_policy", "fcfs")),
        max_total_tokens=options.max_total_tokens,
        max_running_requests=options.max_running_requests,
        tp=options.tp,
        enable_metrics=bool(extra.get("enable_metrics", True)),
        overrides=dict(extra.get("engine_args", {})),
    )


def _default_device() -> str:
    import importlib

    torch = importlib.import_module("torch")
    return "cuda" if torch.cuda.is_available() else "cpu"


def create_runtime(options: RuntimeOptions) -> SGLangRuntime:
    """The runtime registry's factory (``serve --runtime sglang``); not started yet."""
    settings = settings_from_options(options)
    state_dir = options.extra.get("state_dir")
    control = ControlState()
    if "fairness" in options.extra:
        control.fairness = dict(options.extra["fairness"])
    if "preemption" in options.extra:
        control.preemption = dict(options.extra["preemption"])
    return SGLangRuntime(
        settings,
        policy=options.policy,
        state_dir=Path(str(state_dir)) if state_dir else None,
        control=control,
    )


__all__ = ["SGLangRuntime", "create_runtime"]
