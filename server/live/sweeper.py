"""Background housekeeping of the live service, twice a second.

* Wall-time quotas: a running program past its ``wall_time_s`` is cancelled (its calls
  aborted) within one sweep, so the kill lands well under a second after the limit.
* Programs end themselves: many agents never say they are done (an unmodified OpenAI client,
  an inferred program), so a program with no call or tool running, none waiting at the
  admission door, and no activity for ``program_idle_s`` is finished. A tool call the model
  asked for whose result has not come back (``ToolCallBook``) keeps a named program open up
  to ``pending_tool_s`` (its agent runs the tool: a test suite, a build, a person's approval
  may take longer than the idle bound, and the program must be there when the result comes);
  past that, and at once for an inferred program (a later call of its chat opens a new one),
  it does not count as running and is closed as abandoned.
* Memory: programs that ended more than ``retain_s`` ago leave the controller's table (the
  store keeps them, its rows written just before by ``before_forget``; reads fall back to
  it).

A program's last activity is recomputed only when an event touched it since the last sweep
(every change of a node is an event): scanning every node of every program twice a second
stalled the event loop for milliseconds per thousand nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agentconsole.scheduler.events import Event
from agentconsole.scheduler.program import NodeState, Program
from agentconsole.server.live.errors import QuotaError
from agentconsole.server.live.periodic import Periodic
from agentconsole.server.live.service import ProgramService


def is_inferred(program: Program) -> bool:
    """The program was inferred from a chat's prefix chain (its agent named none)."""
    return program.labels.get("inferred") == "true"


def last_activity(program: Program) -> float:
    """When anything of the program last happened."""
    latest = program.created_at
    for node in program.nodes.values():
        latest = max(latest, node.created_at, node.started_at or 0.0, node.finished_at or 0.0)
    return latest


class Sweeper:
    """Owns one asyncio task; see the module docstring."""

    def __init__(
        self,
        service: ProgramService,
        *,
        interval_s: float = 0.5,
        program_idle_s: float = 300.0,
        retain_s: float = 600.0,
        pending_tool_s: float = 3600.0,
        before_forget: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.service = service
        self.pending_tool_s = pending_tool_s
        #: called with a program's id just before it leaves memory (the store projector's
        #: ``write_program``: its last rows)
        self.before_forget = before_forget
        self.interval_s = interval_s
        self.program_idle_s = program_idle_s
        self.retain_s = retain_s
        self._periodic = Periodic("sweeper", interval_s, self._tick)
        self._active: dict[str, float] = {}  # last_activity of running programs, as last seen
        self._touched: set[str] = set()  # programs with events since the last sweep
        service.hub.subscribe(self._observe)

    def _observe(self, event: Event) -> None:
        """Hub subscriber: remember which programs changed."""
        if event.program_id:
            self._touched.add(event.program_id)

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def _tick(self) -> None:
        await self.sweep(time.time())

    async def sweep(self, now: float) -> None:
        """One pass (see the module docstring). Changes program states and the table."""
        service = self.service
        service.settle(service.driver.tick(now))
        touched, self._touched = self._touched, set()
        for program in list(service.controller.programs.values()):
            pid = program.program_id
            if program.state.terminal:
                self._active.pop(pid, None)
                ended = program.finished_at or now
                if now - ended > self.retain_s and not service.calls_of(pid):
                    self.before_forget(pid)
                    service.forget(pid)
                continue
            limit = program.quotas.wall_time_s
            if limit is not None and now - program.created_at > limit:
                error = QuotaError(pid, "wall_time_s", limit, now - program.created_at)
                await service.stop_for_quota(pid, error)
            elif self._idle(program, now, pid in touched):
                service.finish_idle(pid, self._active[pid])

    def _idle(self, program: Program, now: float, touched: bool) -> bool:
        pid = program.program_id
        active = self._active.get(pid)
        if active is None or touched:
            active = self._active[pid] = last_activity(program)
        if now - active <= self.program_idle_s or self.service.calls_of(pid):
            return False
        if self.service.driver.door.holds_place(pid, now):
            return False  # waiting at the door is not idleness: its calls (or retry) come
        asked = self.service.tool_calls.pending(pid)
        for node in program.nodes.values():
            if node.state is NodeState.RUNNING and node.node_id not in asked:
                return False
        # a named program's agent runs the tools the model asked for (module docstring)
        waits_on_its_agent = asked and now - active <= self.pending_tool_s
        return not (waits_on_its_agent and not is_inferred(program))
