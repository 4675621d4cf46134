"""An in-memory :class:`ReportPort` standing in for the server core's ProgramService
(``live/toolport.py``), refusing and reporting as it does: a program that no longer runs is
the core's own ``ProgramClosed`` (a 409 ``Conflict``), and a replayed end of a
node that never started starts and ends it."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentconsole.scheduler.controller import QuotaExceeded
from agentconsole.scheduler.program import ToolSpec
from agentconsole.server.gateway import ProgramNotFound, ToolOutcome
from agentconsole.server.live.errors import Conflict, ProgramClosed


@dataclass(slots=True)
class FakeProgram:
    """One program: owner, state, tool nodes (and which of them run) and the tool-call
    quota."""

    tenant: str
    state: str = "running"
    nodes: dict[str, ToolSpec] = field(default_factory=dict)
    tool_calls_quota: int | None = None
    #: tool nodes started and not finished (a test adds one to stand for a node rebuilt
    #: running after a restart)
    running: set[str] = field(default_factory=set)
    #: tool nodes that ended (one in ``running`` too was rebuilt running: it runs)
    done: set[str] = field(default_factory=set)


def _ended(program_id: str, program: FakeProgram) -> Conflict:
    """What the core's ``require_running`` raises for a program that no longer runs: its
    ``ProgramClosed``, a 409 ``Conflict``."""
    return ProgramClosed(program_id, program.state)


@dataclass(slots=True)
class FakePort:
    """Programs by id, created on first sight; records every start/finish."""

    programs: dict[str, FakeProgram] = field(default_factory=dict)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)

    def create(self, tenant: str, program_id: str, tool_calls: int | None = None) -> FakeProgram:
        """Open ``program_id`` for ``tenant`` (a test's explicit ``POST /v1/programs``)."""
        program = self.programs.setdefault(program_id, FakeProgram(tenant))
        program.tool_calls_quota = tool_calls
        return program

    async def check_program(
        self, tenant: str, program_id: str, *, must_exist: bool = False
    ) -> None:
        program = self.programs.get(program_id)
        if program is None and not must_exist:
            return
        if program is None or program.tenant != tenant:
            raise ProgramNotFound(program_id)
        if program.state != "running":
            raise _ended(program_id, program)

    async def ensure_tool_node(
        self, tenant: str, program_id: str, node_id: str, tool: ToolSpec
    ) -> None:
        await self.check_program(tenant, program_id)
        program = self.programs.setdefault(program_id, FakeProgram(tenant))
        if node_id in program.nodes:
            return
        quota = program.tool_calls_quota
        if quota is not None and len(program.nodes) >= quota:
            raise QuotaExceeded(program_id, "tool_calls", quota, len(program.nodes) + 1)
        program.nodes[node_id] = tool

    def _node(self, program_id: str, node_id: str) -> FakeProgram:
        program = self.programs.get(program_id)
        if program is None or node_id not in program.nodes:
            raise ProgramNotFound(program_id, node_id)
        return program

    async def tool_started(self, program_id: str, node_id: str, *, repeat: bool = False) -> None:
        program = self._node(program_id, node_id)
        if program.state != "running":
            raise _ended(program_id, program)
        program.running.add(node_id)
        self.events.append(("started", program_id, node_id, ""))

    async def tool_finished(
        self,
        program_id: str,
        node_id: str,
        outcome: ToolOutcome,
        latency_s: float | None,
        result_bytes: int = 0,
    ) -> None:
        program = self._node(program_id, node_id)
        if node_id not in program.running:
            if node_id in program.done or program.state != "running":
                return  # as the core: an ended node, or a node of an ended program, is left
            # as the core: its start was lost (a crash), yet it ran: started and ended now
            self.events.append(("started", program_id, node_id, ""))
        program.running.discard(node_id)
        program.done.add(node_id)
        self.events.append(("finished", program_id, node_id, outcome))
