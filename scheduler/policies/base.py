"""The policy interface and its registry.

A scheduling policy only *orders*: ``key(ticket, now)`` returns a number, lower runs first (the
shape of SGLang's ``calc_priority`` sort key). Admission budgets, preemption and fairness are
mechanism and live elsewhere, so the controller, the runtimes and the simulator never branch on
a policy's name: they look a policy up here and call ``key``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from agentconsole.scheduler.ticket import CallTicket


class Policy(ABC):
    """Orders queued LLM calls. Implementations are small, stateless and deterministic."""

    name: ClassVar[str]
    summary: ClassVar[str]
    #: True if the policy may preempt running calls for better-keyed waiting ones.
    preemptive: ClassVar[bool] = True
    #: False for request-level policies (what stock engines ship): they see unrelated
    #: requests, so the runtime gives them no program-level help either (no tool-wait KV
    #: decisions; plain LRU caching), which keeps the baselines honest.
    program_aware: ClassVar[bool] = True

    @abstractmethod
    def key(self, ticket: CallTicket, now: float) -> float:
        """Sort key of ``ticket`` at time ``now``; lower runs first. Must not mutate."""

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "summary": self.summary,
            "preemptive": self.preemptive,
            "program_aware": self.program_aware,
        }


P = TypeVar("P", bound=type[Policy])
_REGISTRY: dict[str, Callable[..., Policy]] = {}


def register(cls: P) -> P:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if cls.name in _REGISTRY:
        raise ValueError(f"policy {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def get_policy(name: str, **params: Any) -> Policy:
    """Instantiate the policy registered as ``name``; raises ``KeyError`` listing the choices."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; choose from {', '.join(available())}") from None
    return factory(**params)


def available() -> list[str]:
    return list(_REGISTRY)
