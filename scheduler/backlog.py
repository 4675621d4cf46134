"""The engines' backlog: how long they would take to serve what every live program is still
expected to ask of them (the *drain*), for the policies' tail term.

Why: shortest-remaining-path-first buys the median with the longest programs' time. Above
saturation that makes a burst end badly: the long programs (many calls with tool waits
between them) wait until the short ones are through and then run their calls one after the
other, tool wait by tool wait, while the engines idle for want of other work (measured on the
real engine, docs/BENCHMARKS.md section 8: the last 11 of 12 finishers were the 10-call serial
programs). A program whose remaining path is longer than the drain will finish after the
engines run out of other work anyway, so each second its calls wait is a second added to the
end of the burst.

The drain is priced at today's latency: every live program's expected remaining calls, each
taking what a call took lately from its queueing to its end, as many at a time as the engines
run now (their batch, not their slots: an engine whose memory binds first runs fewer); a
program counts from its first queued call (one waiting at the door, or adopted after a
restart, not yet). While the queue is deep a call's latency is mostly queueing, so the drain
is long and only the longest paths outrun it; as the burst drains the latency falls towards
the service alone and the long programs left go first. (Priced by service alone, the drain is
short all through a burst: a fifth of the calls counted as late and went longest first, and
P95 rose 20-30% on the real engine, section 8.)
"""

from __future__ import annotations

from collections.abc import Iterable


def drain_batch(queued_here: int, running_here: int, running: Iterable[int]) -> int:
    """The batch that prices the drain of a call queued on an engine that holds
    ``queued_here`` waiting calls and runs ``running_here``: every engine's running calls
    (``running``, read only then) while the queue there is a backlog, at least as long as
    the engine's batch, else 0 and the ticket carries no drain. The simulator and serve both
    ask this.

    Why a backlog and not any queue: a call queued behind fewer calls than the engine runs
    starts within about one call's time, so there is no burst whose end a late path could
    set; there the late-path rule only put long paths ahead of cached contexts for nothing
    (below saturation it doubled the tokens ``cp-cache`` recomputed on ``two-tenants``, past
    ``fcfs``'s, and cost seed-mix 2% of P95 at 0.9x capacity: docs/BENCHMARKS.md 2f)."""
    if not queued_here or queued_here < running_here:
        return 0
    return sum(running)


class EngineBacklog:
    """Expected remaining calls per live program, summed."""

    def __init__(self) -> None:
        self._remaining: dict[str, float] = {}
        self.total_calls = 0.0  # sum of the live programs' expected remaining calls

    def expect(self, program_id: str, remaining_calls: float) -> None:
        """``program_id`` is expected to make ``remaining_calls`` more calls."""
        self.total_calls += remaining_calls - self._remaining.get(program_id, 0.0)
        self._remaining[program_id] = remaining_calls

    def served(self, program_id: str) -> None:
        """A call of ``program_id`` ended: one call fewer to come (never below none)."""
        left = self._remaining.get(program_id)
        if left is not None:
            lowered = left - 1.0 if left > 1.0 else 0.0
            self.total_calls += lowered - left
            self._remaining[program_id] = lowered

    def forget(self, program_id: str) -> None:
        """``program_id`` ended: it asks nothing more."""
        self.total_calls -= self._remaining.pop(program_id, 0.0)
        if not self._remaining:
            self.total_calls = 0.0  # no float drift survives an empty backlog

    def drain_s(self, call_latency_s: float, batch: int) -> float:
        """Seconds the engines would take for every remaining call at ``call_latency_s``
        each, ``batch`` at a time (0.0 with no batch)."""
        if batch <= 0 or self.total_calls <= 0.0:
            return 0.0
        return self.total_calls * call_latency_s / batch
