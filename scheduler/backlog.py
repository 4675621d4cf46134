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

The engines run out of work only if the work stops coming. With calls arriving at ``a`` a
second while they are served at ``s``, the backlog empties in ``drain / (1 - a / s)``, and
never while ``a >= s``: in a sustained overload (the door starting a program as each ends) a
long path outruns nothing, and serving it first only reorders a queue that never ends
(measured in ``bench``'s long-coding sessions at 1.5x, docs/BENCHMARKS.md section 8). Both
rates are the backlog's own flows, remembered over about one call latency: what programs
added to it (new programs, estimates raised) and what left it (calls served, estimates
lowered, programs ended).
"""

from __future__ import annotations


class EngineBacklog:
    """Expected remaining calls per live program, summed, and the flows in and out of it."""

    def __init__(self) -> None:
        self._remaining: dict[str, float] = {}
        self.total_calls = 0.0  # sum of the live programs' expected remaining calls
        #: how long the flows remember, in seconds (the controller sets it to a call's latency)
        self.window_s = 1.0
        self._added = 0.0  # calls added lately, decayed over ``window_s``
        self._left = 0.0  # calls that left lately, decayed the same way
        self._flowed_at = 0.0

    def expect(self, program_id: str, remaining_calls: float, now: float) -> None:
        """``program_id`` is expected to make ``remaining_calls`` more calls (as of ``now``)."""
        change = remaining_calls - self._remaining.get(program_id, 0.0)
        self._remaining[program_id] = remaining_calls
        self._flow(change, now)

    def served(self, program_id: str, now: float) -> None:
        """A call of ``program_id`` ended at ``now``: one call fewer to come (never below
        none)."""
        left = self._remaining.get(program_id)
        if left is not None:
            lowered = left - 1.0 if left > 1.0 else 0.0
            self._remaining[program_id] = lowered
            self._flow(lowered - left, now)

    def forget(self, program_id: str, now: float) -> None:
        """``program_id`` ended at ``now``: it asks nothing more."""
        self._flow(-self._remaining.pop(program_id, 0.0), now)
        if not self._remaining:
            self.total_calls = 0.0  # no float drift survives an empty backlog

    def drain_s(self, call_latency_s: float, batch: int, now: float) -> float:
        """Seconds until the engines run out of work at ``now``: every remaining call at
        ``call_latency_s`` each, ``batch`` at a time, stretched by the calls still arriving;
        0.0 with no batch, nothing to come, or calls arriving as fast as they leave."""
        if batch <= 0 or self.total_calls <= 0.0:
            return 0.0
        self._flow(0.0, now)
        if self._added >= self._left:
            return 0.0
        return self.total_calls * call_latency_s / batch / (1.0 - self._added / self._left)

    def _flow(self, change: float, now: float) -> None:
        """Add ``change`` calls to the total and to the flow in (or out, when negative) at
        ``now``, the older flows fading over ``window_s``."""
        elapsed = now - self._flowed_at
        if elapsed > 0.0:
            # a hyperbolic fade: exp's shape near 0, without its call on every ticket
            keep = self.window_s / (self.window_s + elapsed)
            self._added *= keep
            self._left *= keep
            self._flowed_at = now
        self.total_calls += change
        if change > 0.0:
            self._added += change
        else:
            self._left -= change
