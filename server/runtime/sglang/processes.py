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
        atexit.register(self.stop)

    def alive(self) -> bool:
        """True while every engine process runs."""
        return bool(self.children) and all(p.is_alive() for p in self.children)

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


def _descendants(pids: list[int]) -> list[Any]:
    psutil = importlib.import_module("psutil")
    out: dict[int, Any] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(pid).children(recursive=True):
                out[child.pid] = child
    return list(out.values())


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
