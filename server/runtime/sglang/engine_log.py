"""Where SGLang's own output goes: a log file instead of the server's terminal.

Starting an engine prints a lot that a user of ``serve`` does not need: the full server-args
dump, import warnings (quantization kernels, Triton, models that cannot load on this machine),
the scheduler's and detokenizer's start-up logs and progress bars. With a log file set
(``EngineSettings.log_file``; ``serve`` puts it next to the store and prints its path),
:meth:`EngineLog.run` runs a step of the engine's start (importing SGLang, constructing the
engine) so that all of that lands in the file:

* the ``sglang`` loggers of this process write to the file, not to the terminal (from now on:
  SGLang's warnings while serving go there too);
* SGLang's own ``logging.basicConfig(force=True)``, which would replace the server's logging,
  is neutralised in this process with an empty ``SGLANG_LOGGING_CONFIG_PATH`` config;
* Python warnings raised meanwhile are written to the file;
* the engine's processes are spawned with stdout and stderr on the file (and without that
  variable, so they log as SGLang always does). This swaps the process's file descriptors 1
  and 2 for the instant of each spawn; anything another thread prints in that instant lands
  in the file too.

Without a log file nothing changes (tests see SGLang's output as before).
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing.process
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

T = TypeVar("T")
CONFIG_ENV = "SGLANG_LOGGING_CONFIG_PATH"
_FORMAT = "[%(asctime)s] %(name)s %(levelname)s: %(message)s"
_spawn_lock = threading.Lock()


class EngineLog:
    """SGLang's output of one runtime; a no-op when ``path`` is None."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._handler: logging.Handler | None = None
        self._config: Path | None = None

    def run(self, func: Callable[..., T], *args: Any) -> T:
        """``func(*args)`` with SGLang's output going to the file (see the module docstring)."""
        if self.path is None:
            return func(*args)
        self._attach()
        with self._warnings_to_file(), self._children_to_file(), self._config_env():
            return func(*args)

    def _attach(self) -> None:
        if self._handler is not None or self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("", encoding="utf-8")  # a new engine, a new log
        handler = logging.FileHandler(self.path, mode="a", encoding="utf-8")
        handler.setFormatter(logging.Formatter(_FORMAT))
        sglang = logging.getLogger("sglang")
        sglang.addHandler(handler)
        sglang.setLevel(logging.INFO)
        sglang.propagate = False
        self._handler = handler
        fd, name = tempfile.mkstemp(prefix="agentconsole-sglang-logging-", suffix=".json")
        with os.fdopen(fd, "w") as f:  # a config that configures nothing
            json.dump({"version": 1, "disable_existing_loggers": False}, f)
        self._config = Path(name)

    @contextlib.contextmanager
    def _config_env(self) -> Iterator[None]:
        previous = os.environ.get(CONFIG_ENV)
        os.environ[CONFIG_ENV] = str(self._config)
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(CONFIG_ENV, None)
            else:
                os.environ[CONFIG_ENV] = previous

    @contextlib.contextmanager
    def _warnings_to_file(self) -> Iterator[None]:
        assert self.path is not None
        path = self.path
        original = warnings.showwarning

        def to_file(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            with path.open("a", encoding="utf-8") as out:
                out.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = to_file
        try:
            yield
        finally:
            warnings.showwarning = original

    @contextlib.contextmanager
    def _children_to_file(self) -> Iterator[None]:
        assert self.path is not None
        path, owner = self.path, threading.current_thread()
        base = multiprocessing.process.BaseProcess
        original = base.start

        def start(process: Any) -> None:
            if threading.current_thread() is not owner:
                return original(process)
            with _spawn_lock, _spawned_on(path):
                return original(process)

        setattr(base, "start", start)  # noqa: B010  (restored below)
        try:
            yield
        finally:
            setattr(base, "start", original)  # noqa: B010

    def close(self) -> None:
        """Detach from the ``sglang`` loggers and remove the config file."""
        if self._handler is not None:
            logging.getLogger("sglang").removeHandler(self._handler)
            self._handler.close()
            self._handler = None
        if self._config is not None:
            self._config.unlink(missing_ok=True)
            self._config = None


@contextlib.contextmanager
def _spawned_on(path: Path) -> Iterator[None]:
    """File descriptors 1 and 2 on ``path`` and no ``SGLANG_LOGGING_CONFIG_PATH`` (a child
    spawned now inherits both), restored afterwards."""
    config = os.environ.pop(CONFIG_ENV, None)
    target = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    saved = [os.dup(1), os.dup(2)]
    _flush()  # what this process buffered belongs on its terminal, not in the file
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        _flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)
        if config is not None:
            os.environ[CONFIG_ENV] = config


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
