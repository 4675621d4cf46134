"""The program driver's interface: what it asks of others (a tool-wait advisor, a view of
the engines, a cost of restores) and the actions it returns to its carrier.

Kept apart from ``driver.py`` so the tool-wait advisor (``kvtiers.advisor``) depends on the
vocabulary alone, and the carriers (``Simulation``, ``ProgramService``) read the actions from
where they are defined rather than from the module that decides them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from agentconsole.scheduler.events import Scalar
from agentconsole.scheduler.latency import LatencyDistribution
from agentconsole.scheduler.runtime import CacheAction, MemoryView, ProgramContext


# -- what the driver asks of others --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ToolWaitFacts:
    """One program entering a tool wait, in plain numbers (the advisor adds the memory)."""

    program_id: str
    private_tokens: int
    shared_tokens: int
    latency: LatencyDistribution  # of the slowest pending tool (learned, never recorded)
    recompute_s: float  # prefill time of the private tokens
    door_tokens: int  # private tokens the programs parked at the door will claim


@dataclass(frozen=True, slots=True)
class KvAdvice:
    """A tool-wait decision: ``action`` on the private KV, retained ``retain_s`` where it
    ends up, the context protected for ``kept_s`` (what the door counts) and the numbers
    behind it (the ``kv.decision`` event's data)."""

    action: CacheAction
    retain_s: float
    kept_s: float
    data: Mapping[str, Scalar]


class KvAdvisor(Protocol):
    """Decides a tool wait (``kvtiers.advisor.ToolWaitAdvisor``); may keep running averages."""

    def advise(self, facts: ToolWaitFacts, memory: MemoryView, now: float) -> KvAdvice:
        """The decision for ``facts`` under ``memory`` at ``now``."""
        ...


class EngineView(Protocol):
    """What the carrier's engines hold for one program (the engine its last call ran on)."""

    def memory(self, program_id: str, now: float) -> MemoryView: ...

    def context(self, program_id: str, now: float) -> ProgramContext | None:
        """The program's last context still cached (None: nothing of it)."""
        ...


class CostView(Protocol):
    """The time a restore takes (``ServiceModel`` extended by the host link)."""

    def prefill_seconds(self, new_tokens: int, cached_tokens: int = 0) -> float: ...

    def reload_seconds(self, tokens: int) -> float:
        """Copying ``tokens`` of KV from host memory back to HBM."""
        ...


# -- what the driver tells its carrier -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StartPrograms:
    """These programs passed the door: reveal their first nodes / release their first calls."""

    program_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CacheHint:
    """Apply ``action`` to the program's private KV, retained ``retain_s``."""

    program_id: str
    action: CacheAction
    retain_s: float


@dataclass(frozen=True, slots=True)
class AbortCalls:
    """Abort these calls in the engine (by exact call id)."""

    call_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StopProgram:
    """The program went over a quota: stop it (the carrier cancels or fails it)."""

    program_id: str
    quota: str
    limit: float
    value: float


@dataclass(frozen=True, slots=True)
class ProgramEnded:
    """The program ended (or, parked too long at the door, was dropped from the driver's
    books): drop what placing its calls keeps for it (the replica or data-parallel rank it is
    mapped to, which would count as load to come). Its KV is left to eviction; a later call
    under the same id is placed again by the score. Sent once, for a program the driver
    tracked (one that arrived, queued a call or ran a tool)."""

    program_id: str


Action = StartPrograms | CacheHint | AbortCalls | StopProgram | ProgramEnded


@dataclass(frozen=True, slots=True)
class Retained:
    """A program's context kept (or offloaded) through a tool wait, for the KV views."""

    program_id: str
    tenant: str
    tokens: int
    action: CacheAction
    until: float
