"""Most-progress-first: programs with more completed calls go first.

This is the seed notes' reading of Agentix (completed calls as a progress proxy). It favours
programs that already invested GPU time, which raises completion throughput but can starve
newcomers: the fairness guard's aging bound is what keeps it honest.
"""

from __future__ import annotations

from agentconsole.scheduler.policies.base import Policy, register
from agentconsole.scheduler.ticket import CallTicket


@register
class MostProgress(Policy):
    name = "progress"
    summary = "most completed calls first (the seed's reading of Agentix)"

    def key(self, ticket: CallTicket, now: float) -> float:
        return -float(ticket.completed_calls) - ticket.boost
