"""The simulator's typed events: what can happen at an instant of virtual time.

Each event knows which handler of the simulation (:class:`Handlers`, which
:class:`~agentconsole.server.runtime.sim.simulation.Simulation` implements) it fires (Vidur's
shape: ``event.fire(sim, now)``), so the loop that pops the heap stays a few lines and never
dispatches on a tag. Events are small slotted dataclasses; the heap orders
``(time, sequence, event)`` so two events are never compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agentconsole.sample_traces.format import TraceProgram
from agentconsole.server.runtime.sim.engine import Note


class Handlers(Protocol):
    """What the events fire: the simulation's handlers. A protocol rather than the
    ``Simulation`` class, which imports this module: the compiled build cannot compile a
    module whose types close an import cycle (it crashes at import). Positional only: the
    events pass their fields in order, and the handlers name them as they like."""

    def arrive(self, program: TraceProgram, now: float, /) -> None: ...

    def tool_done(self, program_id: str, node: int, attempt: int, now: float, /) -> None: ...

    def cancel(self, program_id: str, now: float, /) -> None: ...

    def engine_wakes(self, engine: int, stamp: int, now: float, /) -> None: ...

    def answer_arrives(self, engine: int, note: Note, now: float, /) -> None: ...

    def door_wakes(self, now: float, /) -> None: ...


class SimEvent:
    """Something scheduled at a virtual time."""

    __slots__ = ()

    def fire(self, sim: Handlers, now: float) -> None:
        raise NotImplementedError


@dataclass(slots=True)
class ProgramArrives(SimEvent):
    program: TraceProgram

    def fire(self, sim: Handlers, now: float) -> None:
        sim.arrive(self.program, now)


@dataclass(slots=True)
class ToolReturns(SimEvent):
    """Attempt ``attempt`` of the tool node at index ``node`` of ``program_id`` ends."""

    program_id: str
    node: int
    attempt: int

    def fire(self, sim: Handlers, now: float) -> None:
        sim.tool_done(self.program_id, self.node, self.attempt, now)


@dataclass(slots=True)
class ProgramCancelled(SimEvent):
    program_id: str

    def fire(self, sim: Handlers, now: float) -> None:
        sim.cancel(self.program_id, now)


@dataclass(slots=True)
class EngineWakes(SimEvent):
    """Engine ``engine`` finishes its block or plans again (stale when ``stamp`` is old:
    the engine was rescheduled since)."""

    engine: int
    stamp: int

    def fire(self, sim: Handlers, now: float) -> None:
        sim.engine_wakes(self.engine, self.stamp, now)


@dataclass(slots=True)
class AnswerArrives(SimEvent):
    """A call the engine finished reaches its agent (after the call overhead)."""

    engine: int
    note: Note

    def fire(self, sim: Handlers, now: float) -> None:
        sim.answer_arrives(self.engine, self.note, now)


@dataclass(slots=True)
class DoorWakes(SimEvent):
    """A retention counted at the admission door lapses: parked programs may start."""

    def fire(self, sim: Handlers, now: float) -> None:
        sim.door_wakes(now)
