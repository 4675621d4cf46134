"""The program door of ``serve``: a new program's first call waits while the working set of
the programs already started fills the runtime's KV memory.

Why: above saturation, starting every program at once makes new prefills evict the contexts of
programs in flight, which then recompute them (the simulator measures fcfs at 3x capacity
finishing a third of what the engine can). The counting is ``scheduler.admission.ProgramGate``,
the same the simulator drives; this module feeds it from what ``serve`` sees:

- a program counts from its first call; when its last call in flight ends it keeps counting
  for ``idle_grace_s`` (the agent's next call or a tool start usually follows at once), so a
  program an agent never finishes cannot hold the door shut;
- through a tool wait it counts for as long as the tool-wait decision keeps its context
  (``keep``/``offload``: the retention; ``recompute``: not at all);
- finish, cancel and quota stops end it; the sweeper's tick lets lapsed retentions go.

The budget is ``memory_share`` of the HBM + DRAM tokens the runtime reports (read when a
program arrives), or ``budget_tokens`` when set; a runtime reporting no KV tiers has no door.
Only program-aware policies have a door, as in the simulator. A first call that waits longer
than ``wait_s`` gets 503 with ``Retry-After`` and leaves the queue.
"""

from __future__ import annotations

import asyncio
import time

from agentconsole.kvtiers.toolwait import Decision
from agentconsole.scheduler.admission import ProgramGate
from agentconsole.scheduler.runtime import Runtime
from agentconsole.server.live.errors import Unavailable


class ProgramDoor:
    """Admits new programs into ``serve`` (see the module docstring)."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        enabled: bool = False,
        wait_s: float = 120.0,
        budget_tokens: int | None = None,
        memory_share: float = 0.9,
        idle_grace_s: float = 5.0,
    ) -> None:
        self.runtime = runtime
        self.wait_s = wait_s
        self.budget_tokens = budget_tokens
        self.memory_share = memory_share
        self.idle_grace_s = idle_grace_s
        self.gate = ProgramGate(0, enabled=enabled)
        self._waiting: dict[str, asyncio.Event] = {}

    @property
    def enabled(self) -> bool:
        return self.gate.enabled

    async def enter(self, program_id: str, tokens: int, *, program_aware: bool) -> None:
        """Let a call of ``program_id`` (``tokens`` of prompt) through: at once for a started
        program (it counts again), else when the working set leaves room. Raises
        :class:`Unavailable` after ``wait_s`` at the door."""
        if not (self.gate.enabled and program_aware):
            return
        if self.gate.is_started(program_id):
            self.gate.rejoin(program_id)
            return
        event = self._waiting.get(program_id)  # a fan-out's calls wait together
        if event is None:
            budget = self._budget()
            if budget is None:
                return
            self.gate.budget_tokens = budget
            if self.gate.try_start(program_id, tokens, time.time()):
                return
            event = self._waiting[program_id] = asyncio.Event()
        try:
            async with asyncio.timeout(self.wait_s):
                await event.wait()
        except (TimeoutError, asyncio.CancelledError) as error:
            if not event.is_set():  # still at the door: leave it
                self._waiting.pop(program_id, None)
                self._open(self.gate.finish(program_id, time.time()))
            if isinstance(error, TimeoutError):
                raise Unavailable(
                    f"program {program_id!r} waited {self.wait_s:.0f} s at the admission door: "
                    "the running programs fill the KV memory",
                    headers={"Retry-After": "10"},
                ) from None
            raise

    def call_ended(self, program_id: str) -> None:
        """``program_id`` has no call in flight any more: it counts for ``idle_grace_s``."""
        now = time.time()
        self._open(self.gate.step_out(program_id, now + self.idle_grace_s, now))

    def tool_wait(self, program_id: str, decision: Decision | None) -> None:
        """``program_id`` waits on a tool under ``decision`` (None: nothing of it cached)."""
        now = time.time()
        kept = self.idle_grace_s if decision is None else decision.context_kept_s
        self._open(self.gate.step_out(program_id, now + kept, now))

    def finish(self, program_id: str) -> None:
        """``program_id`` ended: it stops counting (and leaves the queue if it waited)."""
        self._open(self.gate.finish(program_id, time.time()))

    def tick(self, now: float) -> None:
        """Time passed (the sweeper): lapsed retentions stop counting."""
        self._open(self.gate.wake(now))

    @property
    def waiting(self) -> int:
        """Programs at the door."""
        return self.gate.parked

    def _open(self, started: list[str]) -> None:
        for program_id in started:
            event = self._waiting.pop(program_id, None)
            if event is not None:
                event.set()

    def _budget(self) -> int | None:
        if self.budget_tokens is not None:
            return self.budget_tokens
        tiers = self.runtime.snapshot().tiers
        memory = sum(t.capacity_tokens for name, t in tiers.items() if name in ("hbm", "dram"))
        return int(memory * self.memory_share) if memory > 0 else None
