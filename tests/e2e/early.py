"""Slow servers started ahead of their tests, one after another, in one background thread.

An SGLang server takes 40-120 s to start on 2 cores, nearly all of it CPU spent importing
SGLang and torch in the server and in each engine process. Most of the suite runs in pytest's
one process and leaves the other core idle, so the servers are started from the session's
start on that core, and the tests that use them run last (``conftest.py`` moves them), by
when their servers are up.

A test module registers a starter under the name of the fixture that hands its server out
(``register``, at import, so during collection); that fixture takes the started server with
:meth:`EarlyStarts.claim` and stops it when its tests are done. The session fixture
``early_starts`` runs the starters whose fixture a collected test uses, in the order those
tests will run, and stops what no test claimed (an interrupted session).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar


class Stoppable(Protocol):
    def stop(self, timeout: float = ...) -> Any: ...


S = TypeVar("S", bound=Stoppable)

#: a starter: given a fresh temporary folder and the environment to start processes with (the
#: session's when the starts began: tests change ``os.environ`` meanwhile), the started server
Starter = Callable[[Path, Mapping[str, str]], Stoppable]
#: fixture name -> starter
STARTERS: dict[str, Starter] = {}


def register(fixture: str, starter: Starter) -> None:
    """Start ``starter``'s server early for the tests that use fixture ``fixture``."""
    STARTERS[fixture] = starter


@dataclass
class _Slot:
    ready: threading.Event = field(default_factory=threading.Event)
    server: Stoppable | None = None
    error: BaseException | None = None
    claimed: bool = False


class EarlyStarts:
    """Runs ``starters`` ((fixture, folder, starter), in order) in one daemon thread, with the
    environment as it is now."""

    def __init__(self, starters: Iterable[tuple[str, Path, Starter]]) -> None:
        self._order = list(starters)
        self._env = dict(os.environ)
        self._slots = {name: _Slot() for name, _, _ in self._order}
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="early-starts", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for name, folder, starter in self._order:
            slot = self._slots[name]
            try:
                if self._cancelled.is_set():
                    raise RuntimeError(f"{name}: not started (the session is ending)")
                slot.server = starter(folder, self._env)
            except BaseException as error:  # re-raised by claim(), in the test that needs it
                slot.error = error
            finally:
                slot.ready.set()

    def claim(self, fixture: str) -> Stoppable:
        """The server started for ``fixture`` (waits until it is up; raises its start's error).
        From then on the claimer stops it."""
        slot = self._slots[fixture]
        slot.ready.wait()
        if slot.error is not None:
            raise slot.error
        assert slot.server is not None
        slot.claimed = True
        return slot.server

    def lend(self, fixture: str, kind: type[S]) -> Iterator[S]:
        """A fixture's body: the server started for ``fixture`` (a ``kind``), stopped when the
        fixture ends."""
        server = self.claim(fixture)
        assert isinstance(server, kind)
        try:
            yield server
        finally:
            server.stop(60)

    def close(self) -> None:
        """Start nothing more, wait for the start under way (an interrupted session may have
        ended its processes: the starter then fails fast); stop every server no fixture
        claimed."""
        self._cancelled.set()
        self._thread.join()
        for slot in self._slots.values():
            if not slot.claimed and slot.server is not None:
                slot.server.stop(60)
