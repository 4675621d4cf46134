"""Autellix's least-attained-service policies: PLAS and ATLAS.

PLAS orders calls by the service their *program* already received (a program-level
generalisation of LAS/MLFQ: short programs are not stuck behind long ones). ATLAS uses the
service attained along the call's critical path so far, which suits parallel programs: a
fan-out does not make every branch look old. Both discretise the signal into K queues with
geometric service ranges and are FIFO inside a queue (the mechanism's tie-break); the
wait/service promotion that stops starvation is the fairness guard's aging bound.
"""

from __future__ import annotations

import math

from agentconsole.scheduler.policies.base import Policy, register
from agentconsole.scheduler.ticket import CallTicket


class _DiscretisedLas(Policy):
    def __init__(self, first_quantum_s: float = 0.05, ratio: float = 2.0, queues: int = 12):
        if first_quantum_s <= 0 or ratio <= 1 or queues < 1:
            raise ValueError("need first_quantum_s > 0, ratio > 1 and queues >= 1")
        self.first_quantum_s = first_quantum_s
        self.ratio = ratio
        self.queues = queues
        self._log_ratio = math.log(ratio)

    def queue_index(self, service_s: float) -> int:
        """Queue Q_i holds service in [q·r^(i-1), q·r^i); Q_0 is below the first quantum."""
        if service_s < self.first_quantum_s:
            return 0
        i = 1 + int(math.log(service_s / self.first_quantum_s) / self._log_ratio)
        return min(i, self.queues - 1)

    def _signal(self, ticket: CallTicket) -> float:
        raise NotImplementedError

    def key(self, ticket: CallTicket, now: float) -> float:
        return float(self.queue_index(self._signal(ticket))) - ticket.boost


@register
class Plas(_DiscretisedLas):
    name = "plas"
    summary = "Autellix PLAS: least attained service of the program, discretised queues"

    def _signal(self, ticket: CallTicket) -> float:
        return ticket.program_service_s


@register
class Atlas(_DiscretisedLas):
    name = "atlas"
    summary = "Autellix ATLAS: least attained service along the critical path"

    def _signal(self, ticket: CallTicket) -> float:
        return ticket.cp_service_s
