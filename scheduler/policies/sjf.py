"""Node-level shortest job first on the predicted service time of the call itself."""

from __future__ import annotations

from agentconsole.scheduler.policies.base import Policy, register
from agentconsole.scheduler.ticket import CallTicket


@register
class ShortestJobFirst(Policy):
    name = "sjf"
    program_aware = False
    summary = "node shortest-job-first on predicted prefill + decode time of the call"

    def key(self, ticket: CallTicket, now: float) -> float:
        return ticket.service_estimate_s - ticket.boost
