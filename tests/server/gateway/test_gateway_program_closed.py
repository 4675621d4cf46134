"""The core's refusal of a program that no longer runs is its own class, ``ProgramClosed``: a
409 ``Conflict`` (callers catching that still do) that the gateway answers
``program_not_running`` from its class alone. The port is not asked for the program's state
again (a port whose state read still says running, as a stale read would, cannot turn the
cancel's refusal into a generic ``conflict``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentconsole.server.gateway import ProgramClosed as PortProgramClosed
from agentconsole.server.gateway import ToolGateway
from agentconsole.server.gateway.errors import ProgramNotRunning
from agentconsole.server.live.errors import Conflict, ProgramClosed
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, register, tool_body

pytestmark = pytest.mark.anyio
ECHO = {"type": "builtin", "name": "echo"}


@dataclass(slots=True)
class ClosedAtStart(FakePort):
    """The start is refused as on a cancelled program, while ``check_program`` still passes."""

    checks: int = 0
    checks_at_start: int = -1

    async def check_program(
        self, tenant: str, program_id: str, *, must_exist: bool = False
    ) -> None:
        self.checks += 1
        await FakePort.check_program(self, tenant, program_id, must_exist=must_exist)

    async def tool_started(self, program_id: str, node_id: str, *, repeat: bool = False) -> None:
        self.checks_at_start = self.checks
        raise ProgramClosed(program_id, "cancelled")


def test_program_closed_is_the_cores_conflict_and_the_ports_contract() -> None:
    error = ProgramClosed("p", "finished")
    assert isinstance(error, Conflict)
    assert (error.status, error.type, error.state) == (409, "program_not_running", "finished")
    assert PortProgramClosed is ProgramClosed


async def test_the_gateway_tells_a_closed_program_by_its_class(gateway: ToolGateway) -> None:
    await register(gateway, tool_body("echo", ECHO))
    port = ClosedAtStart()
    port.create("t1", "p1")
    with pytest.raises(ProgramNotRunning) as refused:
        await call(gateway, port, "echo", {"text": "x"})
    assert refused.value.extra.get("state") == "cancelled"
    assert port.checks == port.checks_at_start  # its state was not read again after the start
    assert gateway.runner.executions == 0
