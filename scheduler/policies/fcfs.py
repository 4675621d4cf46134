"""Request-level first come, first served: the baseline every engine ships."""

from __future__ import annotations

from agentconsole.scheduler.policies.base import Policy, register
from agentconsole.scheduler.ticket import CallTicket


@register
class Fcfs(Policy):
    name = "fcfs"
    program_aware = False
    summary = "request-level first come, first served (no program awareness)"
    preemptive = False

    def key(self, ticket: CallTicket, now: float) -> float:
        return ticket.arrival - ticket.boost
