"""Program critical-path policies.

``critical-path`` is shortest-remaining-critical-path-first at the program level: the call of the
program that would finish soonest goes first (SRPT on E2E), nodes that release more work get a
bonus (unlock value), and programs close to missing a deadline jump ahead. SRPT alone makes the
longest programs pay for the others' speed, call after call; every second a program has
already waited in queues lowers its key by ``wait_weight`` seconds, which bounds that tail
(measured on seed-mix at 0.5-0.9x capacity: P95 0.93-1.00x fcfs's instead of 1.00-1.04x,
docs/BENCHMARKS.md section 2c).

Above saturation SRPT also ends a burst badly: the longest programs run their calls last, one
tool wait after another, while the engines idle for want of other work. A program whose
remaining path is longer than the engines' drain (``ticket.drain_s``, see
``scheduler/backlog.py``) sets the burst's end, so it goes first as a late one does, by how far
its path outruns the drain (measured on the real engine, docs/BENCHMARKS.md section 8). The
SGLang plugin re-ranks its queue every pass, so a waiting call's slack shrinks as it waits; the
simulator's queue keys a call once and follows it by ``moving_key``: the key is constant until the
first slack falls below its threshold, then falls a second per second (every slack does), with
one more look when a second source turns urgent.

``cp-cache`` adds cache affinity: a call whose context must first be reloaded from host memory
or recomputed pays that restore cost in its key, so resident contexts are served while they are
resident and cold ones do not push them out.
"""

from __future__ import annotations

import math

from agentconsole.scheduler.policies.base import MovingKey, Policy, register
from agentconsole.scheduler.ticket import CallTicket


@register
class CriticalPath(Policy):
    name = "critical-path"
    summary = "remaining critical-path work, unlock value, and slack to a deadline or the drain"

    def __init__(
        self,
        unlock_bonus_s: float = 0.05,
        urgent_slack_s: float = 5.0,
        urgency_s: float = 1e4,
        wait_weight: float = 4.0,
        tail_slack_s: float = 0.0,
    ):
        self.unlock_bonus_s = unlock_bonus_s
        self.urgent_slack_s = urgent_slack_s
        self.urgency_s = urgency_s
        self.wait_weight = wait_weight
        #: a call is late once its slack (the drain, less the time since it was queued, less its
        #: remaining path) falls below this
        self.tail_slack_s = tail_slack_s

    def key(self, ticket: CallTicket, now: float) -> float:
        key, _, _ = self._key(ticket, now)
        return key

    def moving_key(self, ticket: CallTicket, now: float) -> MovingKey:
        key, urgent, next_urgent = self._key(ticket, now)
        return MovingKey(key, urgent, next_urgent)

    def _key(self, ticket: CallTicket, now: float) -> tuple[float, bool, float]:
        """The key at ``now``, whether it is urgent (then it falls with the slack, a second per
        second), and when a source of urgency not on yet turns on (``math.inf``: none)."""
        remaining = ticket.remaining_cp_s
        urgent: float | None = None  # the least slack: late calls go first, least slack first
        next_urgent = math.inf
        if ticket.deadline is not None:
            slack = ticket.deadline - now - remaining
            if slack < self.urgent_slack_s:
                urgent = slack
            else:
                next_urgent = now + (slack - self.urgent_slack_s)
        drain = ticket.drain_s
        if drain > 0.0:
            # the drain was estimated when the call was queued: what passed since is spent
            slack = drain - (now - ticket.arrival) - remaining
            if slack < self.tail_slack_s:
                if urgent is None or slack < urgent:
                    urgent = slack
            else:
                next_urgent = min(next_urgent, now + (slack - self.tail_slack_s))
        if urgent is not None:
            return urgent - self.urgency_s - ticket.boost, True, next_urgent
        key = remaining - self.unlock_bonus_s * ticket.unlock_value - ticket.boost
        return key - self.wait_weight * ticket.program_wait_s, False, next_urgent


@register
class CriticalPathCache(CriticalPath):
    name = "cp-cache"
    summary = "critical path plus cache affinity (restore cost of the call's KV)"

    def __init__(self, restore_weight: float = 1.0, **kwargs: float):
        super().__init__(**kwargs)
        self.restore_weight = restore_weight

    def key(self, ticket: CallTicket, now: float) -> float:
        # the base key by name, not ``super()`` (a proxy object per call, once per push)
        key, _, _ = self._key(ticket, now)
        return key + self.restore_weight * ticket.restore_cost_s

    def moving_key(self, ticket: CallTicket, now: float) -> MovingKey:
        key, urgent, next_urgent = self._key(ticket, now)
        return MovingKey(key + self.restore_weight * ticket.restore_cost_s, urgent, next_urgent)
