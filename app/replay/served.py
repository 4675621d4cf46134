"""A trace replayed through ``serve``'s own program glue on a started runtime, minus HTTP.

What the real-engine benchmarks measure as "agentconsole" (``benchmarks/bench_sglang_cpu.py``
on the CPU engine, ``benchmarks/gpu_lane.py`` on a GPU) and what ``agentconsole calibrate``
fits the simulator against: serve's ``ProgramService`` (the program driver's tickets from the
engine's prefix probe, the tool-wait advisor, the door when on) playing the trace's agents, so
a figure of either lane, or of calibrate, is a figure of what ``serve`` runs, and they cannot
drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentconsole.sample_traces.format import TraceProgram
from agentconsole.scheduler.door import ProgramDoor
from agentconsole.scheduler.growth import RunTimes
from agentconsole.scheduler.runtime import Runtime
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.replay import ReplayedProgram, SegmentText, ServiceReplay
from agentconsole.server.live.service import DoorSettings, ProgramService
from agentconsole.server.runtime.sglang.replay import ProgramOutcome

#: the replayed agents never retry: a first call the door answered 503 after serve's wait
#: bound would be a lost program, so in a replay a program waits at the door for good
REPLAY_DOOR_WAIT_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class ServedReplay:
    """What one replay through serve's glue left: each program's outcome, the door (how often
    it held a program back), and the run times the driver learned (a later run may start
    from them, as a server that ran a while)."""

    outcomes: list[ProgramOutcome]
    door: ProgramDoor
    run_times: RunTimes


async def replay_as_served(
    runtime: Runtime,
    trace: list[TraceProgram],
    book: SegmentText,
    *,
    policy: str,
    door: bool,
    shortest_first: bool = True,
    learned: RunTimes | None = None,
) -> ServedReplay:
    """Play ``trace`` through a fresh ``ProgramService`` on ``runtime`` (started), its door on
    or off; stops the service, not the runtime."""
    settings = DoorSettings(enabled=door, wait_s=REPLAY_DOOR_WAIT_S, shortest_first=shortest_first)
    served = ProgramService(runtime, EventHub(), policy=policy, door=settings)
    if learned is not None:
        served.driver.run_times.adopt(learned)
    served.runtime_ready.set()
    try:
        ended = await ServiceReplay(served, trace, book).run()
    finally:
        await served.stop()
    return ServedReplay(outcomes_of(ended), served.driver.door, served.driver.run_times)


def outcomes_of(ended: Sequence[ReplayedProgram]) -> list[ProgramOutcome]:
    """The replayed programs as the benchmarks' outcome rows (``outcome_summary``)."""
    return [
        ProgramOutcome(
            e.trace.id,
            e.trace.tenant,
            e.trace.shape,
            e.e2e_s,
            e.success,
            prompt_tokens=e.prompt_tokens,
            cached_tokens=e.cached_tokens,
            arrival_s=e.trace.arrival_s,
            cancelled=e.cancelled,
        )
        for e in ended
    ]
