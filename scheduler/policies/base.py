"""The policy interface and its registry.

A scheduling policy only *orders*: ``key(ticket, now)`` returns a number, lower runs first (the
shape of SGLang's ``calc_priority`` sort key). Admission budgets, preemption and fairness are
mechanism and live elsewhere, so the controller, the runtimes and the simulator never branch on
a policy's name: they look a policy up here and call ``key``.

A key may move with time (a deadline's slack shrinks as a call waits). ``moving_key`` says how, so
a queue that keys a call once can still rank it as one that re-keys every pass would: the key
is constant, or falls one second per second, until a stated time.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from agentconsole.scheduler.registry import Registry
from agentconsole.scheduler.ticket import CallTicket


@dataclass(frozen=True, slots=True)
class MovingKey:
    """How a call's key moves from the time it was asked: ``key`` then, constant (or, when
    ``falling``, lower by one for every second that passes) until ``until``, after which the
    policy must be asked again (``math.inf``: never)."""

    key: float
    falling: bool = False
    until: float = math.inf


class Policy(ABC):
    """Orders queued LLM calls. Implementations are small, stateless and deterministic."""

    name: ClassVar[str]
    summary: ClassVar[str]
    #: True if the policy may preempt running calls for better-keyed waiting ones.
    preemptive: ClassVar[bool] = True
    #: False for request-level policies (what stock engines ship): they see unrelated
    #: requests, so the runtime gives them no program-level help either (no tool-wait KV
    #: decisions, no hold on a queued call's cached context; plain LRU caching), which keeps
    #: the baselines honest.
    program_aware: ClassVar[bool] = True

    @abstractmethod
    def key(self, ticket: CallTicket, now: float) -> float:
        """Sort key of ``ticket`` at time ``now``; lower runs first. Must not mutate."""

    def moving_key(self, ticket: CallTicket, now: float) -> MovingKey:
        """``key(ticket, now)`` and how it moves after ``now`` (a policy whose key reads the
        time says so here; by default the key never moves). Must not mutate."""
        return MovingKey(self.key(ticket, now))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "summary": self.summary,
            "preemptive": self.preemptive,
            "program_aware": self.program_aware,
        }


POLICIES: Registry[Policy] = Registry("policy")
register = POLICIES.register
get_policy = POLICIES.create
available = POLICIES.names
