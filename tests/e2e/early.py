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

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar


class Stoppable(Protocol):
    def stop(self, timeout: float = ...) -> Any: ...


S = TypeVar("S", bound=Stoppable)

#: fixture name -> starter (given a fresh temporary folder, returns the started server)
STARTERS: dict[str, Callable[[Path], Stoppable]] = {}


def register(fixture: str, starter: Callable[[Path], Stoppable]) -> None:
    """Start ``starter``'s server early for the tests that use fixture ``fixture``."""
    STARTERS[fixture] = starter


@dataclass
class _Slot:
    ready: threading.Event = field(default_factory=threading.Event)
    server: Stoppable | None = None
    error: BaseException | None = None
    claimed: bool = False


class EarlyStarts:
    """Runs ``starters`` ((fixture, folder, starter), in order) in one daemon thread."""

    def __init__(self, starters: Iterable[tuple[str, Path, Callable[[Path], Stoppable]]]) -> None:
        self._order = list(starters)
        self._slots = {name: _Slot() for name, _, _ in self._order}
        self._thread = threading.Thread(target=self._run, name="early-starts", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for name, folder, starter in self._order:
            slot = self._slots[name]
            try:
                slot.server = starter(folder)
            except BaseException as error:  # re-raised by claim(), in the test that needs it
                slot.error = error
            finally:
                slot.ready.set()

    def claim(self, fixture: str) -> Stoppable:
        """The server started for ``fixture`` (waits until it is up; raises its start's error).
        The claimer stops it."""
        slot = self._slots[fixture]
        slot.claimed = True
        slot.ready.wait()
        if slot.error is not None:
            raise slot.error
        assert slot.server is not None
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
        """Wait for the starts still under way; stop every server no fixture claimed."""
        self._thread.join()
        for slot in self._slots.values():
            if not slot.claimed and slot.server is not None:
                slot.server.stop(60)
