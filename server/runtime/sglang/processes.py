"""SGLang's engine processes inside the server process: start them safely, stop only them.

``sglang.Engine`` is written to own its process: its ``shutdown()`` SIGKILLs *every* child of
the host process (``kill_process_tree(os.getpid())``) and is registered with ``atexit``; its
launch-phase SIGQUIT handler and the tokenizer manager's running-phase one kill the whole
process tree including the host; the tokenizer manager also takes over SIGTERM. In a server
that has other children (tool executors, test harnesses) and its own shutdown, none of that is
acceptable, so this module:

* :func:`launching` wraps ``Engine(...)``: it keeps SGLang's ``atexit.register`` calls made
  during construction for itself instead of registering them, and records which
  ``multiprocessing`` children the construction started (also on failure, to clean up).
* :class:`EngineProcesses` stops exactly those processes and their descendants (SIGTERM, then
  SIGKILL after a grace period) and reaps them; an ``atexit`` hook of ours does the same at
  interpreter exit.
* :func:`reclaim_signals` undoes the tokenizer manager's loop signal handlers: SIGTERM goes
  back to whoever had it (uvicorn), SIGQUIT only records that an engine child failed
  (:func:`sigquit_seen`); the runtime's health probe then reports the engine down.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("agentconsole.sglang")
_SIGQUIT_AT: list[float] = []
#: how SGLang titles its processes (``setproctitle``): ``sglang::scheduler_DP1`` and the like
SGLANG_TITLE = "sglang::"


def on_sigquit(signum: int | None = None, frame: object = None) -> None:
    """SIGQUIT handler (SGLang children send it when they fail): record it, kill nothing.

    Module-level so SGLang can pickle it into ``ServerArgs.custom_sigquit_handler``.
    """
    _SIGQUIT_AT.append(time.time())
    logger.error("SGLang engine child signalled a failure (SIGQUIT)")


def sigquit_seen(since: float = 0.0) -> bool:
    """Whether an engine child signalled a failure at or after wall time ``since``."""
    return any(t >= since for t in _SIGQUIT_AT)


@dataclass(slots=True)
class Launch:
    """What one ``Engine(...)`` construction left behind."""

    exit_hooks: list[Callable[..., Any]] = field(default_factory=list)
    children: list[Any] = field(default_factory=list)  # multiprocessing.Process objects


@contextlib.contextmanager
def launching() -> Iterator[Launch]:
    """Context for constructing an Engine: captures its ``atexit`` registrations and the
    processes it starts (in ``Launch``). Not thread-safe: construct one engine at a time."""
    launch = Launch()
    before = {p.pid for p in multiprocessing.active_children()}
    original = atexit.register

    def capture(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        launch.exit_hooks.append(func)
        return func

    atexit.register = capture  # type: ignore[assignment]  # restored in finally
    try:
        yield launch
    finally:
        atexit.register = original
        launch.children = [p for p in multiprocessing.active_children() if p.pid not in before]


class EngineProcesses:
    """The processes of one engine; :meth:`stop` ends them and nothing else."""

    def __init__(self, children: list[Any]) -> None:
        self.children = children
        self.pids = [int(p.pid) for p in children if p.pid is not None]
        self._stopped = False
        # the processes SGLang's own children started (with data parallelism, the controller
        # starts one scheduler per rank): named at the start, since a process that is gone
        # can no longer say what it was
        self._named = _sglang_descendants(self.pids)
        atexit.register(self.stop)

    def alive(self) -> bool:
        """True while every engine process runs."""
        children = bool(self.children) and all(p.is_alive() for p in self.children)
        return children and self.lost() is None

    def lost(self) -> str | None:
        """The first engine process that is gone, as ``"name (pid N)"`` (a data-parallel
        rank's scheduler killed: its calls would wait forever, as SGLang notices nothing);
        None while all run. Only SGLang's own children and the processes they started that
        carry SGLang's title (``sglang::...``): a helper that ends by design is not a loss."""
        for child in self.children:
            if not child.is_alive():
                return f"{getattr(child, 'name', 'process')} (pid {child.pid})"
        for proc, name in self._named:
            if not _runs(proc):
                return f"{name} (pid {proc.pid})"
        return None

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the engine processes and their descendants, SIGKILL what is left after
        ``grace_s``, then reap them. Idempotent; never signals any other process."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        psutil = importlib.import_module("psutil")
        # grandchildren are found first: once a child is gone they are re-parented away
        others = [p for p in _descendants(self.pids) if p.pid not in self.pids]
        for child in self.children:
            with contextlib.suppress(Exception):
                child.terminate()
        for proc in others:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for child in self.children:  # the multiprocessing objects reap their own processes
            child.join(timeout=max(deadline - time.monotonic(), 0.0))
            if child.is_alive():
                child.kill()
                child.join(timeout=grace_s)
        _, left = psutil.wait_procs(others, timeout=max(deadline - time.monotonic(), 0.0))
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def _sglang_descendants(pids: list[int]) -> list[tuple[Any, str]]:
    """The descendants of ``pids`` titled by SGLang (``sglang::scheduler_DP1``), with it."""
    psutil = importlib.import_module("psutil")
    named: list[tuple[Any, str]] = []
    for proc in _descendants(pids):
        with contextlib.suppress(psutil.Error):
            title = " ".join(proc.cmdline()) or proc.name()
            if title.startswith(SGLANG_TITLE):
                named.append((proc, title.split()[0]))
    return named


def _runs(proc: Any) -> bool:
    """Whether ``proc`` (a ``psutil.Process``) still runs (a zombie does not)."""
    psutil = importlib.import_module("psutil")
    try:
        return bool(proc.is_running()) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _descendants(pids: list[int]) -> list[Any]:
    psutil = importlib.import_module("psutil")
    out: dict[int, Any] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(pid).children(recursive=True):
                out[child.pid] = child
    return list(out.values())


class EngineDown(RuntimeError):
    """An engine process is gone: the engine answers no call any more (a 503 to its caller)."""


#: how often :func:`watch` looks at the engine's processes
WATCH_S = 0.5


async def watch(
    procs: EngineProcesses, since: float, on_down: Callable[[str], None], every_s: float = WATCH_S
) -> None:
    """Call ``on_down`` once, with why, when one of ``procs`` is gone or an engine child
    signalled a failure (SIGQUIT) after wall time ``since``; until then look every
    ``every_s``. SGLang itself notices neither in a process that hosts it: a killed rank's
    calls, its aborts and the server's stop would wait on it forever."""
    while True:
        lost = procs.lost()
        if lost is None and sigquit_seen(since):
            lost = "process that signalled a failure (SIGQUIT)"
        if lost is not None:
            on_down(f"SGLang's {lost} is gone: the engine is down (restart serve)")
            return
        await asyncio.sleep(every_s)


def reclaim_signals(previous_sigterm: Any) -> None:
    """Undo the tokenizer manager's loop signal handlers in the running loop (main thread
    only; elsewhere SGLang installs none). ``previous_sigterm`` is ``signal.getsignal``
    taken before SGLang's handle loop started."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    with contextlib.suppress(Exception):
        loop.remove_signal_handler(signal.SIGTERM)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    with contextlib.suppress(Exception):
        loop.add_signal_handler(signal.SIGQUIT, on_sigquit)
