"""Suite-wide guard: a test run leaves no process behind.

An SGLang engine's scheduler and detokenizer processes, a ``serve`` subprocess whose shutdown
timed out, or a browser can outlive the test that started them. Left alive they hold the run's
output pipe open and Python's exit waits on its multiprocessing children, so the run never ends
(CI then times out long after the last test passed). At the end of the session every process
still descended from this one is listed in the summary, sent SIGTERM, and SIGKILL after a grace;
then the process exits with pytest's status without waiting on anything a test left behind.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import settings

# Property tests check properties, not speed: hypothesis's per-example deadline (200 ms) is a
# timing assertion that a loaded 2-core machine fails at random.
settings.register_profile("agentconsole", deadline=None)
settings.load_profile("agentconsole")

#: Seconds a leftover process gets to exit after SIGTERM before it is killed.
TERMINATE_GRACE_S = 5.0


def _leftover_processes() -> list[str]:
    """Terminate (then kill) every live descendant of this process; their command lines."""
    import psutil

    children = psutil.Process().children(recursive=True)
    described: list[str] = []
    for child in children:
        try:
            described.append(f"pid {child.pid}: {' '.join(child.cmdline())[:160]}")
            child.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(children, timeout=TERMINATE_GRACE_S)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=TERMINATE_GRACE_S)
    return described


def _release_temporary_folder(config: pytest.Config) -> None:
    """Do what pytest does in two ``atexit`` hooks, which ``os._exit`` (below) skips: remove
    the lock of this run's temporary folder (``pytest-of-<user>/pytest-<N>``), then delete the
    folders of older runs past the retention count (``tmp_path_retention_count``, 3). Without
    it every run's folder (engine logs, stores: GBs) would stay in ``/tmp`` for three days."""
    from _pytest.pathlib import LOCK_TIMEOUT, cleanup_numbered_dir

    factory = getattr(config, "_tmp_path_factory", None)  # pytest's own, set while it runs
    folder = getattr(factory, "_basetemp", None)
    if folder is None or getattr(factory, "_given_basetemp", None) is not None:
        return  # no numbered folder this run (none used, or ``--basetemp``)
    with contextlib.suppress(OSError):
        (folder / ".lock").unlink()
    keep = int(config.getini("tmp_path_retention_count"))
    if keep > 0 and config.getini("tmp_path_retention_policy") != "none":
        with contextlib.suppress(OSError):
            cleanup_numbered_dir(
                folder.parent, "pytest-", keep, folder.stat().st_mtime - LOCK_TIMEOUT
            )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _release_temporary_folder(session.config)
    leftovers = _leftover_processes()
    session.config.stash[_LEFTOVERS] = leftovers
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Last hook of the run, the report written: end the process with pytest's own status.
    What Python would still do on its way out can wait forever on what a test left: a
    non-daemon thread, a multiprocessing child, or a ZMQ context's finaliser that the final
    garbage collection runs (SGLang's sockets with a message unsent: CI hung there for an hour
    after the last test passed). Lingering non-daemon threads are named first."""
    import os
    import sys
    import threading

    lingering = [
        t.name
        for t in threading.enumerate()
        if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    if lingering:
        sys.stderr.write(f"tests/conftest.py: lingering threads: {', '.join(lingering)}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.stash.get(_EXIT_STATUS, 1))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    leftovers = terminalreporter.config.stash.get(_LEFTOVERS, [])
    if leftovers:
        terminalreporter.write_sep("-", f"{len(leftovers)} process(es) left behind, now ended")
        for line in leftovers:
            terminalreporter.write_line(line)


_LEFTOVERS = pytest.StashKey[list[str]]()
_EXIT_STATUS = pytest.StashKey[int]()
