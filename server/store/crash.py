"""Deterministic crash points for kill -9 tests (the doltlite pattern).

``AGENTCONSOLE_CRASH_AT=<point>:<n>[,<point>:<n>...]`` makes the process SIGKILL itself at
the n-th pass of a named point. The variable is read once, when a :class:`CrashPoints` is
built (writer construction), never on the hot path; an unarmed instance costs one attribute
test per check.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping

ENV_VAR = "AGENTCONSOLE_CRASH_AT"

#: Points the store passes. The tool gateway adds its own (``after_external_call``).
STORE_POINTS = frozenset(
    {
        "before_intent_commit",
        "after_intent_commit",
        "mid_batch_commit",
        "before_result_commit",
        "after_result_commit_before_ack",
        "during_checkpoint",
        "after_migration_commit",
    }
)


class CrashPoints:
    """Counts passes of named points and kills the process at the configured pass."""

    __slots__ = ("_counts", "_lock", "_targets", "armed")

    def __init__(self, targets: Mapping[str, int] | None = None) -> None:
        self._targets = dict(targets or {})
        self._counts = dict.fromkeys(self._targets, 0)
        self._lock = threading.Lock()  # the store's two writer lanes share one instance
        self.armed = bool(self._targets)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CrashPoints:
        """Parse :data:`ENV_VAR`; a malformed spec raises ``ValueError`` (a test bug)."""
        spec = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
        targets: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            point, _, count = part.partition(":")
            n = int(count or "1")
            if n < 1:
                raise ValueError(f"{ENV_VAR}: pass number must be >= 1 in {part!r}")
            targets[point] = n
        return cls(targets)

    def hit(self, point: str) -> None:
        """Count one pass of ``point``; SIGKILL this process if it is the configured pass."""
        if not self.armed or point not in self._targets:
            return
        with self._lock:
            self._counts[point] += 1
            due = self._counts[point] == self._targets[point]
        if due:
            os.kill(os.getpid(), signal.SIGKILL)
