"""A cancel that lands after the gateway's checks, as its call's tool starts: the port then
refuses the start with the core's generic 409 ``conflict`` (as the program service's
``tool_started`` does), and the gateway answers what a call on the cancelled program gets,
``program_not_running``; a ``conflict`` of a program that still runs (a node already running)
is answered as it is."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentconsole.server.gateway import ToolGateway
from agentconsole.server.gateway.errors import GatewayError, ProgramNotRunning
from agentconsole.server.live.errors import Conflict
from agentconsole.server.store import IntentState, make_tool_call_id
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, register, tool_body

pytestmark = pytest.mark.anyio
ECHO = {"type": "builtin", "name": "echo"}


@dataclass(slots=True)
class CancelAtStart(FakePort):
    """The program is cancelled just as its tool starts (the cancel won the race)."""

    async def tool_started(self, program_id: str, node_id: str, *, repeat: bool = False) -> None:
        self.programs[program_id].state = "cancelled"
        await FakePort.tool_started(self, program_id, node_id, repeat=repeat)


@dataclass(slots=True)
class AlreadyRunning(FakePort):
    """The core's other 409 of a start: the node runs already (the program runs on)."""

    async def tool_started(self, program_id: str, node_id: str, *, repeat: bool = False) -> None:
        raise Conflict(f"tool node {node_id!r} is already running", field="node_id")


async def test_a_start_refused_by_a_cancel_answers_program_not_running(
    gateway: ToolGateway,
) -> None:
    await register(gateway, tool_body("echo", ECHO))
    port = CancelAtStart()
    port.create("t1", "p1")
    with pytest.raises(ProgramNotRunning) as raced:
        await call(gateway, port, "echo", {"text": "x"})
    with pytest.raises(ProgramNotRunning) as after:  # a call once the cancel is known
        await call(gateway, port, "echo", {"text": "x"}, node="n2")
    assert (raced.value.status, raced.value.type) == (after.value.status, after.value.type)
    assert gateway.runner.executions == 0
    intent = gateway.store.repo.get_intent(make_tool_call_id("p1", "n1", 1))
    assert intent is not None
    assert intent.state is IntentState.RETRYABLE  # nothing ran


async def test_a_conflict_of_a_running_program_is_answered_as_it_is(
    gateway: ToolGateway,
) -> None:
    await register(gateway, tool_body("echo", ECHO))
    port = AlreadyRunning()
    port.create("t1", "p1")
    with pytest.raises(GatewayError) as refused:
        await call(gateway, port, "echo", {"text": "x"})
    assert (refused.value.status, refused.value.type) == (409, "conflict")
    assert "already running" in refused.value.message
    assert gateway.runner.executions == 0
